"""Chaos for Workflow runs: the worker is SIGKILLed while ``perform`` runs, and while a child's tool call runs.

One worker serves every queue: the perform step (lg.orchestrate), parked while its
children run, and the children's model turns and tool calls. After the kill a fresh
worker takes over (the scheduler re-sends the dead worker's step): ``perform`` is
replayed from the top, the committed calls answer from the frame, and no call starts
a second child. Every child's side effect is logged under one idempotency key, and the
run ends with the undisturbed run's answer.
"""

from __future__ import annotations

import pytest
import workflow_dist_app
from chaos_checks import kill_whole, wait_all, wait_ready

pytestmark = pytest.mark.chaos

ALL_QUEUES = ("lg.orchestrate", "lg.model", "lg.tools")


def _run_killed_at(dist, hang: str, ready: str):
    [worker] = dist.start_workers(
        queues=ALL_QUEUES, pool="threads", concurrency=8, DIST_APP_HANG=hang, DIST_APP_HANG_ONCE="1"
    )
    execution = workflow_dist_app.TransferWorkflow.start_execution("Why is transfer 481 pending?")
    wait_ready(dist, ready, 1)

    kill_whole(worker)
    dist.start_workers(queues=ALL_QUEUES, pool="threads", concurrency=8)
    wait_all([execution], timeout=120)
    return execution.wait(timeout=5)


def _assert_each_child_once(dist, run) -> None:
    assert run.completed, run.error
    assert run.result.text == workflow_dist_app.ANSWERS["respond"]
    assert [step.participant for step in run.result.trajectory] == ["triage", "ledger", "policy", "respond"]
    keys: dict[int, set[str]] = {}
    for tool, n, key in dist.calls():
        if tool == "effect":
            keys.setdefault(n, set()).add(key)
    assert {n: len(found) for n, found in keys.items()} == {1: 1, 2: 1, 3: 1, 4: 1}, dist.calls()


def test_a_worker_killed_while_perform_runs_replays_it_without_running_a_committed_call_again(dist, scheduler):
    run = _run_killed_at(dist, "perform:1", "perform-1")

    _assert_each_child_once(dist, run)
    assert "re-dispatched" in scheduler.text()


def test_a_worker_killed_during_a_childs_tool_call_leaves_every_call_run_once(dist, scheduler):
    run = _run_killed_at(dist, "effect:2", "effect-2")

    _assert_each_child_once(dist, run)
