"""Chaos for Swarm runs: the worker running a Swarm is SIGKILLed while a member's child run is mid tool call.

One worker serves every queue: the member steps (lg.orchestrate), parked while their
children run, and the children's model turns and tool calls. Billing's tool call hangs
(after triage handed off to it), and the whole worker is killed there. The scheduler sends
the dead worker's step again to a fresh worker; billing's child run goes on from its last
committed step, its ending wakes the parked member step, and the Swarm completes. No member
starts a second child: each member's side effect is logged under one idempotency key, and
the run ends with the undisturbed run's answer and journey.
"""

from __future__ import annotations

import pytest
import swarm_dist_app
from chaos_checks import kill_whole, wait_all, wait_ready

pytestmark = pytest.mark.chaos

ALL_QUEUES = ("lg.orchestrate", "lg.model", "lg.tools")


def test_a_worker_killed_while_a_member_runs_leaves_every_member_run_once(dist, scheduler):
    [worker] = dist.start_workers(
        queues=ALL_QUEUES, pool="threads", concurrency=8, DIST_APP_HANG="effect:2", DIST_APP_HANG_ONCE="1"
    )
    execution = swarm_dist_app.ChargeSwarm.start_execution("Why was I charged twice?")
    wait_ready(dist, "effect-2", 1)  # billing's child is in its tool call

    kill_whole(worker)
    dist.start_workers(queues=ALL_QUEUES, pool="threads", concurrency=8)
    wait_all([execution], timeout=120)

    run = execution.wait(timeout=5)
    assert run.completed, run.error
    assert run.response == swarm_dist_app.ANSWER
    assert [step.participant for step in run.result.trajectory] == ["triage", "billing"]
    assert run.result.journey["handoffs"] == [
        {"from": "triage", "to": "billing", "message": swarm_dist_app.HANDOFF_NOTE}
    ]
    keys: dict[int, set[str]] = {}
    for tool, n, key in dist.calls():
        if tool == "effect":
            keys.setdefault(n, set()).add(key)
    assert {n: len(found) for n, found in keys.items()} == {1: 1, 2: 1}, dist.calls()
    assert "re-dispatched" in scheduler.text()
