"""Sessions and retry of Graph runs on real Celery workers, with real Redis and PostgreSQL."""

from __future__ import annotations

from collections import Counter

import assembly_replay_dist_app as app
import pytest

import lg_core
from lg_core import current_configuration

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

QUEUES = ("lg.orchestrate", "lg.model", "lg.tools")


def effects(dist) -> Counter:
    return Counter(n for tool, n, _key in dist.calls() if tool == "effect")


def test_a_graph_whose_node_failed_is_retried_on_workers_and_each_side_effect_happens_once(dist, tmp_path):
    outage = tmp_path / "outage"
    outage.touch()
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8, ASSEMBLY_OUTAGE=str(outage))

    failed = app.SettleGraph.start_execution("Settle transfer 481.").wait(timeout=90)
    assert failed.failed, failed.error
    assert effects(dist) == Counter({1: 1}), "the confirm node failed before its side effect"
    outage.unlink()  # the provider is back

    execution = lg_core.retry(failed.id)

    assert isinstance(execution, lg_core.Execution), "with a broker the retry runs on the workers"
    run = execution.wait(timeout=90)
    assert run.completed, run.error
    assert run.id == failed.id and run.response == "notify done"
    assert effects(dist) == Counter({1: 1, 2: 1, 3: 1}), "the committed node did not run again"
    assert [step.participant for step in run.result.trajectory] == ["charge", "confirm", "notify"]
    retried = next(e for e in run.events() if e.type == "run_retried")
    assert retried.data["step"] == "root/node-2/confirm"


@pytest.mark.parametrize("assembly", ["SettleWorkflow", "SettleSwarm"])
def test_a_workflow_or_swarm_run_that_failed_is_retried_on_workers(dist, tmp_path, assembly):
    outage = tmp_path / "outage"
    outage.touch()
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8, ASSEMBLY_OUTAGE=str(outage))
    cls = getattr(app, assembly)

    failed = cls.start_execution("Settle transfer 481.").wait(timeout=90)
    assert failed.failed, failed.error
    before = effects(dist)
    outage.unlink()

    run = lg_core.retry(failed.id).wait(timeout=90)

    assert run.completed, run.error
    if assembly == "SettleWorkflow":
        assert before == Counter({1: 1})
        assert run.response == "notify done"
        assert effects(dist) == Counter({1: 1, 2: 1, 3: 1}), "the settled call did not run again"
    else:
        assert before == Counter()
        assert run.response == "confirm done"
        assert effects(dist) == Counter({2: 1})


def test_a_graph_asked_twice_in_one_session_on_workers_sees_its_first_turn_as_history(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)

    first = app.RecallGraph.start_execution("My name is Ada.", session_id="conv-1", actor_id="user-1").wait(timeout=90)
    second = app.RecallGraph.start_execution("What is my name?", session_id="conv-1", actor_id="user-1").wait(
        timeout=90
    )

    assert first.completed and second.completed, (first.error, second.error)
    assert first.response == "seen: My name is Ada."
    assert second.response == "seen: My name is Ada. | What is my name?"
    snapshot = current_configuration().runtime().session_store.load("conv-1", actor_id="user-1")
    assert [(m.role, m.text) for m in snapshot.messages] == [
        ("user", "My name is Ada."),
        ("assistant", first.response),
        ("user", "What is my name?"),
        ("assistant", second.response),
    ]

    other = app.RecallGraph.start_execution("Anything?", session_id="conv-1", actor_id="user-2").wait(timeout=90)
    assert other.failed and type(other.error).__name__ == "SessionActorError"
