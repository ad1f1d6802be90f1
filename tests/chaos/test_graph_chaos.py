"""Chaos for Graph runs: the worker running a graph is SIGKILLed while a node's child run is mid tool call.

One worker serves every queue: the node steps (lg.orchestrate), parked while their
children run, and the children's model turns and tool calls. The ledger node's tool
call hangs, and the whole worker is killed there. The scheduler sends the dead
worker's step again to a fresh worker; the ledger's child run goes on from its last
committed step, its ending wakes the parked node step, and the join runs once both
branches are in. No node starts a second child: every node's side effect is logged
under one idempotency key (the ledger's tool call, cut short, runs again under the
same key), and the run ends with the undisturbed run's answer and routes.
"""

from __future__ import annotations

import graph_dist_app
import pytest
from chaos_checks import kill_whole, wait_all, wait_ready

pytestmark = pytest.mark.chaos

EXPECTED_ROUTES = {("triage", "ledger"), ("triage", "policy"), ("ledger", "respond"), ("policy", "respond")}
ALL_QUEUES = ("lg.orchestrate", "lg.model", "lg.tools")


def _routes(run) -> set[tuple[str, str]]:
    trajectory = run.result.trajectory
    return {
        (trajectory.step(before).participant, trajectory.step(after).participant)
        for before, after in trajectory.transitions()
    }


def test_a_worker_killed_while_a_node_runs_leaves_every_node_run_once(dist, scheduler):
    [worker] = dist.start_workers(
        queues=ALL_QUEUES, pool="threads", concurrency=8, DIST_APP_HANG="effect:2", DIST_APP_HANG_ONCE="1"
    )
    execution = graph_dist_app.TransferGraph.start_execution("Why is transfer 481 pending?")
    wait_ready(dist, "effect-2", 1)  # the ledger node's child is in its tool call

    kill_whole(worker)
    dist.start_workers(queues=ALL_QUEUES, pool="threads", concurrency=8)
    wait_all([execution], timeout=120)

    run = execution.wait(timeout=5)
    assert run.completed, run.error
    assert run.result.text == graph_dist_app.ANSWERS["respond"]
    assert _routes(run) == EXPECTED_ROUTES
    assert [step.participant for step in run.result.trajectory].count("respond") == 1
    keys: dict[int, set[str]] = {}
    for tool, n, key in dist.calls():
        if tool == "effect":
            keys.setdefault(n, set()).add(key)
    assert {n: len(found) for n, found in keys.items()} == {1: 1, 2: 1, 3: 1, 4: 1}, dist.calls()
    assert "re-dispatched" in scheduler.text()
