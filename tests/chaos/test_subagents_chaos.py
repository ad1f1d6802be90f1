"""Chaos for managed subagents: workers SIGKILLed during a child's turn and during the parent's wait.

The parent's steps and the children's turns are durable steps, and a waiting parent
holds no worker, so killing a worker loses only the step it was executing: the
scheduler sends it again to a fresh worker, the child run goes on from its last
committed step, and its ending wakes the parent's parked wait. No committed child
turn runs again (each turn's side effect is logged under one idempotency key: a
call cut short runs again under the same key), and the run ends with the answer of
an undisturbed run.
"""

from __future__ import annotations

import pytest
import subagents_dist_app
from chaos_checks import kill_whole, wait_all, wait_ready

pytestmark = pytest.mark.chaos

ALL_QUEUES = ("lg.orchestrate", "lg.model", "lg.tools")


def _keys_per_turn(dist) -> dict[int, int]:
    keys: dict[int, set[str]] = {}
    for tool, n, key in dist.calls():
        if tool == "effect":
            keys.setdefault(n, set()).add(key)
    return {n: len(found) for n, found in keys.items()}


def test_a_worker_killed_during_a_child_turn_leaves_every_turn_run_once(dist, scheduler):
    [worker] = dist.start_workers(
        queues=ALL_QUEUES, pool="threads", concurrency=8, DIST_APP_HANG="effect:3", DIST_APP_HANG_ONCE="1"
    )
    execution = subagents_dist_app.DistSupportAgent.start_execution("help me")
    wait_ready(dist, "effect-3", 1)  # alpha's follow-up turn is in its tool call

    kill_whole(worker)
    dist.start_workers(queues=ALL_QUEUES, pool="threads", concurrency=8)
    wait_all([execution], timeout=120)

    run = execution.wait(timeout=5)
    assert run.completed, run.error
    assert run.response == subagents_dist_app.FINAL
    assert _keys_per_turn(dist) == {1: 1, 2: 1, 3: 1}, dist.calls()


def test_a_worker_killed_while_the_parent_waits_leaves_the_run_to_complete(dist, scheduler):
    # The parent's steps and the turns run on one worker, the children's tool calls on another, where
    # beta's call holds: the parent is waiting on it (parked) when its worker is killed.
    [orchestrator] = dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=8)
    dist.start_workers(
        queues=("lg.tools",), pool="threads", concurrency=8, DIST_APP_HANG="effect:2", DIST_APP_HANG_SECONDS="4"
    )
    execution = subagents_dist_app.DistSupportAgent.start_execution("help me")
    wait_ready(dist, "effect-2", 1)

    kill_whole(orchestrator)
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=8)
    wait_all([execution], timeout=120)

    run = execution.wait(timeout=5)
    assert run.completed, run.error
    assert run.response == subagents_dist_app.FINAL
    assert _keys_per_turn(dist) == {1: 1, 2: 1, 3: 1}, dist.calls()


def test_a_worker_killed_during_a_restored_childs_follow_up_keeps_its_transcript_once(dist, scheduler):
    # The second run of the session follows up the child the first one kept; the worker running
    # that turn's tool call is killed. The turn's commit writes the child's transcript: once.
    from lg_core.subagents.persistence import conversation_session_id, registry_session_id

    agent = subagents_dist_app.DistKeepingAgent
    [first_worker] = dist.start_workers(queues=ALL_QUEUES, pool="threads", concurrency=8)
    first = agent.start_execution("spawn", session_id="conv-chaos", actor_id="acme").wait(timeout=90)
    assert first.completed, first.error
    kill_whole(first_worker)

    [worker] = dist.start_workers(
        queues=ALL_QUEUES, pool="threads", concurrency=8, DIST_APP_HANG="effect:3", DIST_APP_HANG_ONCE="1"
    )
    execution = agent.start_execution("follow", session_id="conv-chaos", actor_id="acme")
    wait_ready(dist, "effect-3", 1)
    kill_whole(worker)
    dist.start_workers(queues=ALL_QUEUES, pool="threads", concurrency=8)
    wait_all([execution], timeout=120)

    run = execution.wait(timeout=5)
    assert run.completed, run.error
    assert _keys_per_turn(dist) == {1: 1, 3: 1}, dist.calls()
    sessions = dist.config.runtime().session_store
    registry = sessions.load(registry_session_id("conv-chaos", "acme"), actor_id="acme")
    (entry,) = registry.state["subagents"]
    assert entry["completed_turns"] == 2
    transcript = sessions.load(conversation_session_id(entry["conversation_id"]), actor_id="acme").messages
    assert [m.text for m in transcript if m.role == "user"] == ["alpha?", "more?"]
    assert transcript[-1].text == "notes on alpha? + more?"
