"""Chaos for agents as tools: the worker is SIGKILLed while a tool call's child Agent is in its own tool call.

One worker serves every queue: the coordinator's tool-call steps (parked while their
children run) and the children's model turns and tool calls. The sentiment Agent's
tool call hangs, and the whole worker is killed there. The scheduler sends the dead
worker's step again to a fresh worker; the child goes on from its last committed
step, its ending wakes the parked tool-call step, which commits its answer. No tool
call starts a second child: every side effect is logged under one idempotency key
(the child's cut-short call runs again under the same key), and the coordinator
answers as an undisturbed run does.
"""

from __future__ import annotations

import agent_tools_dist_app
import pytest
from chaos_checks import kill_whole, wait_all, wait_ready

from lg_core import current_configuration
from lg_core.assemblies.child_runs import child_run_id

pytestmark = pytest.mark.chaos

ALL_QUEUES = ("lg.orchestrate", "lg.model", "lg.tools")


def test_a_worker_killed_during_a_tool_calls_child_leaves_every_side_effect_once(dist, scheduler):
    [worker] = dist.start_workers(
        queues=ALL_QUEUES, pool="threads", concurrency=8, DIST_APP_HANG="effect:11", DIST_APP_HANG_ONCE="1"
    )
    execution = agent_tools_dist_app.CoordinatorAgent.start_execution("My transfer is stuck!")
    wait_ready(dist, "effect-11", 1)  # the sentiment child is in its tool call

    kill_whole(worker)
    dist.start_workers(queues=ALL_QUEUES, pool="threads", concurrency=8)
    wait_all([execution], timeout=120)

    run = execution.wait(timeout=5)
    assert run.completed, run.error
    assert run.response == agent_tools_dist_app.ANSWER
    keys: dict[int, set[str]] = {}
    for tool, n, key in dist.calls():
        if tool == "effect":
            keys.setdefault(n, set()).add(key)
    assert {n: len(found) for n, found in keys.items()} == {1: 1, 2: 1, 3: 1, 4: 1, 11: 1}, dist.calls()
    store = current_configuration().runtime().store
    for key in ("root/turn-0/tool/sentiment", "root/turn-0/tool/investigate"):
        assert store.load_run(child_run_id(run.id, key)).status == "completed"
    assert "re-dispatched" in scheduler.text()
