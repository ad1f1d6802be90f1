"""A store call a step makes on its way (not its commit) while the store is out of reach.

A model turn reads the run's pending interjections when it starts and again
before it completes the run; an at_most_once tool's call writes the mark that
it starts before the tool runs. Such a read that finds the store out of reach
past its retries (StoreUnavailableError) must not become the run's outcome,
since nothing is wrong with the run: the read waits the outage out
(``store_outage_patience``); past that, the attempt fails as an
infrastructure error and the run stays running for recovery (here a local
run: ``resume()``), never ``failed``.
"""

from __future__ import annotations

import pytest

import lg_core
from lg_core import Agent, Configuration, StoreUnavailableError, Tool, with_configuration
from lg_core.engine.engine import Engine
from lg_core.providers import scripted
from lg_core.store import RunStore

scripted.register("outage-in-steps", lambda _request: {"text": "Answered."})


class AnsweringAgent(Agent):
    model = "scripted:outage-in-steps"


class DownFor:
    """``RunStore.pending_interjections`` raising StoreUnavailableError for its first ``failures`` calls."""

    def __init__(self, store: RunStore, failures: int) -> None:
        self.failures, self.calls = failures, 0
        self.real = store.pending_interjections

    def __call__(self, run_id: str):
        self.calls += 1
        if self.calls <= self.failures:
            raise StoreUnavailableError("the store's database could not be reached for 6.0 s (12 tries)")
        return self.real(run_id)


@pytest.fixture
def quick_pauses(monkeypatch):
    monkeypatch.setattr("lg_core.store.outage_waits.FIRST_PAUSE_SECONDS", 0.001)
    monkeypatch.setattr("lg_core.store.outage_waits.MAX_PAUSE_SECONDS", 0.001)
    # As when another process may have interjected: this process does not know there are none.
    monkeypatch.setattr(Engine, "interjections_may_be_pending", lambda _engine, _run_id: True)


def test_a_read_on_a_steps_way_waits_out_the_outage(file_config, monkeypatch, quick_pauses):
    store = file_config.runtime().store
    down = DownFor(store, failures=3)
    monkeypatch.setattr(store, "pending_interjections", down)

    run = AnsweringAgent.ask("Hello?")

    assert (run.outcome, run.response) == ("completed", "Answered.")
    assert down.calls > 3


def test_without_patience_the_attempt_fails_and_the_run_stays_running_for_resume(tmp_path, monkeypatch, quick_pauses):
    configuration = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}", store_outage_patience=0)
    store = configuration.runtime().store
    down = DownFor(store, failures=1000)
    monkeypatch.setattr(store, "pending_interjections", down)
    try:
        with with_configuration(configuration):
            with pytest.raises(StoreUnavailableError):
                AnsweringAgent.ask("Hello?", run_id="outage-1")
            assert down.calls >= 1
            assert lg_core.get_run("outage-1").outcome is None  # running: not failed by the outage

            monkeypatch.setattr(store, "pending_interjections", down.real)  # the store is back
            run = lg_core.resume("outage-1")

            assert (run.outcome, run.response) == ("completed", "Answered.")
    finally:
        configuration.close()


class ChargeTool(Tool):
    description = "Charge the card; must never run twice."
    input_schema = {"type": "object", "properties": {}}
    at_most_once = True
    calls: list[str] = []

    def call(self, input):
        ChargeTool.calls.append(self.idempotency_key)
        return "charged"


scripted.register("outage-in-steps-charge", [{"tool_calls": [{"name": "charge", "arguments": {}}]}, {"text": "Done."}])


class ChargingAgent(Agent):
    model = "scripted:outage-in-steps-charge"
    tools = [ChargeTool]


def test_an_at_most_once_tool_waits_for_its_start_mark_through_the_outage_and_runs_once(
    file_config, monkeypatch, quick_pauses
):
    store = file_config.runtime().store
    real, tries = store.mark_body_entered, []

    def down_twice(*args):
        tries.append(args)
        if len(tries) <= 2:
            raise StoreUnavailableError("the store's database could not be reached for 6.0 s (12 tries)")
        return real(*args)

    monkeypatch.setattr(store, "mark_body_entered", down_twice)
    ChargeTool.calls = []

    run = ChargingAgent.ask("Charge it.")

    assert (run.outcome, run.response) == ("completed", "Done.")
    assert len(tries) == 3 and len(ChargeTool.calls) == 1


def test_a_session_the_opening_cannot_load_fails_the_attempt_not_the_run(tmp_path, monkeypatch):
    """A run's first step loads its session: a store out of reach there leaves the run running."""
    configuration = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        with with_configuration(configuration):
            sessions = configuration.runtime().engine.sessions
            real = sessions.open

            def unreachable(*_args, **_kwargs):
                raise StoreUnavailableError("the store's database could not be reached for 6.0 s (12 tries)")

            monkeypatch.setattr(sessions, "open", unreachable)
            with pytest.raises(StoreUnavailableError):
                AnsweringAgent.ask("Hello?", run_id="outage-2", session_id="conversation-2")
            assert lg_core.get_run("outage-2").outcome is None  # running: not failed by the outage

            monkeypatch.setattr(sessions, "open", real)  # the store is back
            run = lg_core.resume("outage-2")

            assert (run.outcome, run.response) == ("completed", "Answered.")
    finally:
        configuration.close()
