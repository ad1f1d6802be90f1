"""Chaos for Graph runs: the worker executing a graph's node steps is SIGKILLed while a node's child runs.

The node steps (lg.orchestrate) run on a worker of their own; the nodes' Agents (their
model turns and tool calls) on another. The ledger node's tool call is held for a few
seconds, and meanwhile the node worker is killed with every node step it held. The
scheduler sends those steps again to a fresh node worker, whose attempts find each
node's child run under the id derived from the step, so no child starts twice: every
node's side effect is logged once, and the run ends with the undisturbed run's answer
and routes.
"""

from __future__ import annotations

import graph_dist_app
import pytest
from chaos_checks import kill_whole, wait_all, wait_ready

pytestmark = pytest.mark.chaos

EXPECTED_ROUTES = {("triage", "ledger"), ("triage", "policy"), ("ledger", "respond"), ("policy", "respond")}


def _routes(run) -> set[tuple[str, str]]:
    trajectory = run.result.trajectory
    return {
        (trajectory.step(before).participant, trajectory.step(after).participant)
        for before, after in trajectory.transitions()
    }


def test_a_node_worker_killed_while_a_node_runs_leaves_every_node_run_once(dist, scheduler):
    [nodes_worker] = dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=8)
    dist.start_workers(
        queues=("lg.model", "lg.tools"),
        pool="threads",
        concurrency=8,
        DIST_APP_HANG="effect:2",
        DIST_APP_HANG_ONCE="1",
        DIST_APP_HANG_SECONDS="4",
    )
    execution = graph_dist_app.TransferGraph.start_execution("Why is transfer 481 pending?")
    wait_ready(dist, "effect-2", 1)  # the ledger node's child is in its tool call

    kill_whole(nodes_worker)
    dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=8)
    wait_all([execution], timeout=120)

    run = execution.wait(timeout=5)
    assert run.completed, run.error
    assert run.result.text == graph_dist_app.ANSWERS["respond"]
    assert _routes(run) == EXPECTED_ROUTES
    assert [step.participant for step in run.result.trajectory].count("respond") == 1
    effects = sorted(n for tool, n, _key in dist.calls() if tool == "effect")
    assert effects == [1, 2, 3, 4], f"a node's child ran again: {dist.calls()}"
    assert "re-dispatched" in scheduler.text()
