"""Chaos for builder-made runs: the one worker is SIGKILLed while a built Graph's, Swarm's or Workflow's
child run is mid tool call, and a fresh worker, which never saw the builder, finishes the run.

The run carries the definition it started with (builder_dist_app names its Agents and functions),
so the fresh worker reads it back from the run's frame: the Graph's routes and fan-in mapper, the
Swarm's handoffs, the Workflow's ``perform`` replayed against its recorded calls. Every side effect
is logged under one idempotency key (the call cut short runs again under the same key), and the
run ends with the undisturbed run's answer.
"""

from __future__ import annotations

import builder_dist_app
import graph_dist_app
import pytest
import swarm_dist_app
from chaos_checks import kill_whole, wait_all, wait_ready

pytestmark = pytest.mark.chaos

ALL_QUEUES = ("lg.orchestrate", "lg.model", "lg.tools")
BUILT = {
    # builder, the effect to kill the worker in, the answer, every effect's number
    "graph": (builder_dist_app.transfer_graph, 2, graph_dist_app.ANSWERS["respond"], {1, 2, 3, 4}),
    "swarm": (builder_dist_app.charge_swarm, 2, swarm_dist_app.ANSWER, {1, 2}),
    "workflow": (builder_dist_app.research_workflow, 2, graph_dist_app.ANSWERS["respond"], {1, 2, 3, 4}),
}


@pytest.mark.parametrize("kind", sorted(BUILT))
def test_a_worker_killed_during_a_built_run_leaves_each_side_effect_once_and_the_same_answer(dist, scheduler, kind):
    make, hang, answer, effects = BUILT[kind]
    [worker] = dist.start_workers(
        queues=ALL_QUEUES, pool="threads", concurrency=8, DIST_APP_HANG=f"effect:{hang}", DIST_APP_HANG_ONCE="1"
    )
    execution = make().start_execution("Why is transfer 481 pending?")
    wait_ready(dist, f"effect-{hang}", 1)  # a child run is in its tool call

    kill_whole(worker)
    dist.start_workers(queues=ALL_QUEUES, pool="threads", concurrency=8)
    wait_all([execution], timeout=120)

    run = execution.wait(timeout=5)
    assert run.completed, run.error
    assert run.response == answer
    keys: dict[int, set[str]] = {}
    for tool, n, key in dist.calls():
        if tool == "effect":
            keys.setdefault(n, set()).add(key)
    assert {n: len(found) for n, found in keys.items()} == dict.fromkeys(effects, 1), dist.calls()
    assert "re-dispatched" in scheduler.text()
