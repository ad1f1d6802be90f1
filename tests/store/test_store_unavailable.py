"""A PostgreSQL run store that is down: the public calls raise StoreUnavailableError, and nothing is lost.

The server is stopped (not crashed: tests/chaos/test_postgres_crash.py does
that, with workers) after a run completed, so the runtime and its pooled
connections exist when it goes away. Store calls retry for about 4-9 s before
they give up; the pauses are skipped here (``time.sleep`` patched in the
store's module), the tries and the server's refusals are real.
"""

from __future__ import annotations

import threading

import pytest

import lg_core
from lg_core import Agent, Configuration, StoreUnavailableError, Tool, with_configuration
from lg_core.providers import scripted
from lg_scheduler.stack.servers import PostgresServer

scripted.register("store-unavailable", lambda _request: {"text": "Stored."})


class StoredAgent(Agent):
    model = "scripted:store-unavailable"


@pytest.fixture
def own_postgres():
    server = PostgresServer().start()  # stopped and started again below: not the session's server
    yield server
    server.stop()


@pytest.fixture
def no_retry_pauses(monkeypatch):
    monkeypatch.setattr("lg_core.store.transient_errors.time.sleep", lambda _seconds: None)


def _pause(seconds: float) -> None:
    """A real pause (no_retry_pauses patches time.sleep itself)."""
    threading.Event().wait(seconds)


def test_calls_that_need_a_stopped_store_raise_store_unavailable_and_work_again_once_it_is_back(
    own_postgres, no_retry_pauses
):
    configuration = Configuration(run_store=own_postgres.create_database("lg_down"))
    try:
        with with_configuration(configuration):
            run = StoredAgent.ask("Remember this.")
            assert run.outcome == "completed"
            own_postgres.halt()

            with pytest.raises(StoreUnavailableError, match="could not be reached") as raised:
                lg_core.get_execution(run.id)
            assert raised.value.__cause__ is not None  # the driver's error, for the log
            with pytest.raises(StoreUnavailableError):
                lg_core.list_runs()
            with pytest.raises(StoreUnavailableError):
                StoredAgent.ask("Lost while the store is down?")

            own_postgres.start()
            assert lg_core.get_execution(run.id).wait(timeout=10).response == "Stored."
            assert [r.id for r in lg_core.list_runs()] == [run.id]  # the refused ask left no run behind
    finally:
        configuration.close()


class HaltingTool(Tool):
    """Stops the store's server while its call runs, once: the call's commit cannot reach it."""

    tool_name = "halting"
    description = "Stops the database."
    input_schema = {"type": "object", "properties": {}}
    server: PostgresServer | None = None
    calls: list[str] = []

    def call(self, input):
        HaltingTool.calls.append(self.idempotency_key)
        if HaltingTool.server is not None:
            HaltingTool.server.halt()
            HaltingTool.server = None
        return "halted"


scripted.register(
    "store-unavailable-tool", [{"tool_calls": [{"name": "halting", "arguments": {}}]}, {"text": "Went on."}]
)


class HaltingAgent(Agent):  # module level: resume rebuilds the run from its import path
    model = "scripted:store-unavailable-tool"
    tools = [HaltingTool]


def test_a_local_run_whose_commit_waits_out_the_outage_commits_its_step_once(own_postgres, no_retry_pauses, caplog):
    """The tool's commit finds the server stopped; it keeps the result and tries again until the
    server is back (store_outage_patience), so ask() finishes and the tool ran once."""
    configuration = Configuration(run_store=own_postgres.create_database("lg_patient"))
    HaltingTool.server, HaltingTool.calls = own_postgres, []
    restart = threading.Timer(3.0, own_postgres.start)
    try:
        with with_configuration(configuration), caplog.at_level("INFO", logger="lg_core.store.outage_waits"):
            restart.start()
            run = HaltingAgent.ask("Stop the database.")

            assert (run.outcome, run.response) == ("completed", "Went on.")
            assert len(HaltingTool.calls) == 1
            step = configuration.runtime().store.load_step(run.id, "root/turn-0/tool/call_0_0")
            assert step is not None and step.status == "succeeded" and step.error is None, step
        messages = [record.getMessage() for record in caplog.records]
        assert any(
            m.startswith(
                f"the commit of step root/turn-0/tool/call_0_0 of run {run.id}: the run store cannot be reached"
            )
            for m in messages
        ), messages
        assert any("the run store answers again after" in m for m in messages), messages
    finally:
        restart.join()
        configuration.close()


def test_a_local_run_whose_commit_cannot_reach_the_store_raises_and_resumes_once_it_is_back(
    own_postgres, no_retry_pauses
):
    """Without patience: the step's commit gives up after the store's own retries, ask raises, the
    run stays running in the store (as if this process had been killed), and resume() finishes it later."""
    configuration = Configuration(run_store=own_postgres.create_database("lg_local"), store_outage_patience=0)
    HaltingTool.server, HaltingTool.calls = own_postgres, []
    try:
        with with_configuration(configuration):
            with pytest.raises(StoreUnavailableError):
                HaltingAgent.ask("Stop the database.", run_id="halted-1")

            own_postgres.start()
            assert lg_core.get_run("halted-1").outcome is None  # running: nothing of it was lost
            run = lg_core.resume("halted-1")

            assert (run.outcome, run.response) == ("completed", "Went on.")
            assert (
                len(HaltingTool.calls) == 2 and len(set(HaltingTool.calls)) == 1
            )  # its commit failed: run again, same key
    finally:
        configuration.close()


LONG_ANSWER = " ".join(f"word{n}" for n in range(40))


class StreamHalts:
    """The store's server, stopped by the model call that streams LONG_ANSWER, once."""

    server: PostgresServer | None = None


def _halting_stream(_request):
    if StreamHalts.server is not None:
        StreamHalts.server.halt()
        StreamHalts.server = None
    return {"text": LONG_ANSWER, "delta_delay": 0.1}  # about 4 s of streaming


scripted.register("store-unavailable-stream", _halting_stream)


class StreamingAgent(Agent):
    model = "scripted:store-unavailable-stream"


def test_a_model_turn_streaming_through_an_outage_goes_on_and_commits_once_the_store_is_back(
    own_postgres, no_retry_pauses
):
    """Between streamed chunks the turn polls the run's cancel flag. A poll that cannot reach the
    store is a missed poll (the flag is read again a second later), not the run's failure."""
    configuration = Configuration(run_store=own_postgres.create_database("lg_stream"))
    StreamHalts.server = own_postgres
    restart = threading.Timer(6.0, own_postgres.start)
    try:
        with with_configuration(configuration):
            restart.start()
            run = StreamingAgent.ask("Talk for a while.")

            assert (run.outcome, run.response) == ("completed", LONG_ANSWER), run.error
    finally:
        restart.join()
        configuration.close()


def test_a_scheduler_pass_stops_at_the_first_sweep_that_finds_the_store_down(own_postgres, no_retry_pauses, caplog):
    """One line in the log per pass, not a traceback per sweep; the next pass after the outage runs them all."""
    from lg_scheduler.scheduler import Scheduler
    from tests.engine.numbered_tool import RecordingPublisher

    configuration = Configuration(run_store=own_postgres.create_database("lg_sweeps"))
    try:
        with with_configuration(configuration):
            scheduler = Scheduler(configuration.runtime(), publisher=RecordingPublisher())
            assert scheduler.run_once()["errors"] == 0
            own_postgres.halt()

            with caplog.at_level("WARNING", logger="lg_scheduler.scheduler"):
                assert scheduler.run_once()["errors"] == 1
            [line] = [r for r in caplog.records if r.name == "lg_scheduler.scheduler"]
            assert line.exc_info is None and "could not be reached" in line.getMessage()
            assert "this pass stops, the next one retries" in line.getMessage()

            own_postgres.start()
            assert scheduler.run_once()["errors"] == 0
    finally:
        configuration.close()


def test_after_an_outage_the_scheduler_gives_a_lease_that_ran_out_during_it_one_lease_period(
    own_postgres, no_retry_pauses, caplog
):
    """No holder can renew its lease while the database is down: a live one gets a lease period after
    the outage to renew it (or commit), before the sweep takes its step over (lg_scheduler.recovery.OutageGrace)."""
    from lg_scheduler.scheduler import Scheduler
    from tests.engine.numbered_tool import RecordingPublisher
    from tests.store.outbox_steps import create_distributed_run

    configuration = Configuration(run_store=own_postgres.create_database("lg_grace"), lease_seconds=2)
    key = "root/turn-0/model"
    try:
        with with_configuration(configuration):
            store = configuration.runtime().store
            scheduler = Scheduler(configuration.runtime(), publisher=RecordingPublisher())
            create_distributed_run(store, "r1", (("model", key),))
            assert store.claim_step("r1", key, "another-host:4242:1", lease_seconds=1) == 1
            assert scheduler.run_once()["redispatched"] == 0
            own_postgres.halt()
            assert scheduler.run_once()["errors"] == 1
            _pause(1.5)  # the lease runs out while the store is down
            own_postgres.start()

            with caplog.at_level("INFO", logger="lg_scheduler.scheduler"):
                assert scheduler.run_once()["redispatched"] == 0  # spared: its holder could not renew it
            assert any("taken over only if not renewed within 2 s" in r.getMessage() for r in caplog.records)
            _pause(2.2)
            assert scheduler.run_once()["redispatched"] == 1  # not renewed within a lease period: taken over
    finally:
        configuration.close()
