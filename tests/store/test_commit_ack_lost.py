"""A commit (a step's, or a new run's) that applied but whose acknowledgement was lost.

RunStore._commit_once is wrapped in retry_transient. When the database applies
a COMMIT but the connection drops before the client reads the answer
(PostgreSQL restart or failover: "server closed the connection"), the whole
commit is tried again. The retry finds the frame moved (by itself), the engine
replays the transition on the reloaded frame, and the store then reports
``step_already_completed``: Committer.commit returns no successors. A local run
(Agent.ask) has no relay to send them: its dispatcher stops, ask() returns a
Run without an outcome, and the run stays ``running``, held by a live process.
"""

from __future__ import annotations

import inspect

import pytest

from lg_core import Agent
from lg_core.errors import InvocationError, StoreUnavailableError
from lg_core.providers import scripted
from lg_core.store import RunStore
from lg_core.store.transient_errors import retry_transient
from tests.engine.numbered_tool import NumberedTool, numbered_calls

scripted.register("commit-ack-lost", numbered_calls(1, 2))


class EchoAgent(Agent):
    model = "scripted:commit-ack-lost"
    tools = [NumberedTool]


def _lose_the_answer_of_the_first_model_commit(monkeypatch, error: Exception) -> list[str]:
    """The first model turn's commit applies, then raises ``error`` as if its answer was lost;
    returns the keys of the commits it did that to."""
    inner = inspect.unwrap(RunStore._commit_once)  # the attempt itself, without retry_transient
    lost: list[str] = []

    def applied_then_lost(self, commit, *now):
        result = inner(self, commit, *now)
        if commit.step_key == "root/turn-0/model" and not lost:
            lost.append(commit.step_key)
            raise error
        return result

    monkeypatch.setattr(RunStore, "_commit_once", retry_transient(applied_then_lost))
    return lost


def test_a_local_run_whose_commit_acknowledgement_was_lost_still_completes(file_config, monkeypatch):
    lost = _lose_the_answer_of_the_first_model_commit(monkeypatch, OSError("server closed the connection unexpectedly"))

    run = EchoAgent.ask("go")

    record = file_config.runtime().store.load_run(run.id)
    assert lost and (run.outcome, record.status) == ("completed", "completed"), (run.outcome, record.status)


def test_a_step_commit_sent_again_after_an_outage_it_was_applied_in_is_recognised(file_config, monkeypatch):
    """The commit applied, then its answer was lost and the store's retries gave up
    (StoreUnavailableError): the engine sends it again once the store answers
    (store_outage_patience), with the first call's time, so the store recognises
    the step it finished as this commit's rather than a lost race."""
    unreachable = StoreUnavailableError("the store's database could not be reached for 6.0 s (12 tries)")
    lost = _lose_the_answer_of_the_first_model_commit(monkeypatch, unreachable)
    monkeypatch.setattr("lg_core.store.outage_waits.FIRST_PAUSE_SECONDS", 0.001)

    run = EchoAgent.ask("go")

    store = file_config.runtime().store
    assert lost and (run.outcome, store.load_run(run.id).status) == ("completed", "completed")
    assert store.load_step(run.id, "root/turn-0/model").attempts <= 1


def test_a_run_whose_creation_answer_was_lost_is_created_once_and_reported_created(file_config, monkeypatch):
    """create_run is retried when its connection fails, also after its COMMIT applied: the retry
    finds the run and must not tell the caller (start_execution) that the run did not start."""
    inner = RunStore._create_run_once.__wrapped__
    lost: list[str] = []

    def ack_lost_once(self, run, *args):
        status = inner(self, run, *args)
        if not lost:
            lost.append(run["id"])
            raise OSError("server closed the connection unexpectedly")  # after the COMMIT was applied
        return status

    monkeypatch.setattr(RunStore, "_create_run_once", retry_transient(ack_lost_once))

    run = EchoAgent.ask("go")

    assert lost == [run.id] and run.completed
    assert [r.id for r in file_config.runtime().store.list_runs()] == [run.id]


def test_a_run_id_taken_before_is_still_refused(file_config):
    first = EchoAgent.ask("go")
    with pytest.raises(InvocationError, match="already exists"):
        EchoAgent.ask("go", run_id=first.id)
