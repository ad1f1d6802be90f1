"""Waiting for the model's reply to an interjection: Run.interject and Execution.reply.

The run's next model turn reads the interjection and its commit records which
message answers it; the caller waits on the store, so the same wait works for
a run in this process and for one on workers (tests/distributed).
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from lg_core import (
    Agent,
    AgentInterjectionError,
    CancellationToken,
    DeadlineExceededError,
    InvocationError,
    RunNotFoundError,
    get_execution,
)
from lg_core.errors import CancelledError
from tests.engine.numbered_tool import NumberedTool


class TwoTurns:
    """Turn 1 waits for the test, then calls a tool; later turns answer with what they read."""

    def __init__(self, later: list[dict] | None = None) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.turns = 0
        self.later = list(later or [])

    def __call__(self, request) -> dict:
        self.turns += 1
        if self.turns == 1:
            self.entered.set()
            assert self.release.wait(30)
            return {"tool_calls": [{"name": "numbered", "arguments": {"n": 1}}]}
        if self.later:
            return self.later.pop(0)
        users = [m.text for m in request.messages if m.role == "user"]
        return {"text": f"Noted: {users[-1]}"}


@pytest.fixture
def started(config, script):
    """(execution, model): a run whose first model turn is in progress, held by the test."""
    executions = []

    def start(later: list[dict] | None = None):
        model = TwoTurns(later)
        agent: type[Agent] = type("ReplyAgent", (Agent,), {"model": script(model), "tools": [NumberedTool]})
        execution = agent.start_execution("Start.")
        executions.append(execution)
        assert model.entered.wait(30)
        return execution, model

    yield start
    for execution in executions:
        execution.close(timeout=30)


def release_once_stored(config, execution, model) -> None:
    """Let the held model turn answer once the interjection is in the store (from another thread:
    Run.interject blocks until the reply). A fixed delay raced the caller: when the caller was
    descheduled past it, the run finished first and refused the interjection."""
    store = config.runtime().store

    def watch() -> None:
        deadline = time.monotonic() + 60
        while not store.pending_interjections(execution.run_id) and time.monotonic() < deadline:
            time.sleep(0.01)
        model.release.set()

    threading.Thread(target=watch, daemon=True).start()


def test_run_interject_returns_the_reply_of_the_turn_that_read_it(config, started):
    execution, model = started()
    release_once_stored(config, execution, model)

    result = execution.run.interject("Include the latest ledger entry", interjection_id="req-1")

    assert result.text == "Noted: Include the latest ledger entry"
    assert not result.tool_calls and result.tool_uses == ()
    assert result.numbers == (1,) and result.interjection_ids == ("req-1",)
    assert result.step.endswith("/model") and result.message.role == "assistant"
    assert execution.wait(timeout=30).response == "Noted: Include the latest ledger entry"


def test_a_reply_that_calls_tools_returns_before_the_tools_run(started):
    execution, model = started(
        later=[{"tool_calls": [{"name": "numbered", "arguments": {"n": 1}}]}, {"text": "All done."}]
    )
    number = execution.interject("Run the tool once more.")
    model.release.set()

    result = execution.reply(number, timeout=30)

    assert result.tool_calls and [use.name for use in result.tool_uses] == ["numbered"]
    assert result.text == ""
    assert execution.wait(timeout=30).response == "All done."


def test_one_turn_answers_every_interjection_waiting_for_it(started):
    execution, model = started()
    first = execution.interject("First.", interjection_id="a")
    second = execution.interject("Second.")
    model.release.set()

    one, two = execution.reply(first, timeout=30), execution.reply(second, timeout=30)

    assert one == two
    assert one.numbers == (1, 2) and one.interjection_ids == ("a",)
    assert one.text == "Noted: Second."


def test_another_handle_waits_for_the_reply_and_async_code_too(started):
    execution, model = started()
    number = execution.interject("From elsewhere.")
    model.release.set()

    again = get_execution(execution.run_id)
    assert again.reply(number, timeout=30).text == "Noted: From elsewhere."
    assert asyncio.run(again.reply_async(number, timeout=30)).text == "Noted: From elsewhere."


def test_a_timeout_ends_the_wait_not_the_run(started):
    execution, model = started()
    number = execution.interject("Later.")

    with pytest.raises(DeadlineExceededError, match="the run keeps going"):
        execution.reply(number, timeout=0.1)
    with pytest.raises(DeadlineExceededError):
        asyncio.run(execution.reply_async(number, timeout=0.1))
    model.release.set()

    assert execution.reply(number, timeout=30).text == "Noted: Later."
    assert execution.wait(timeout=30).completed


def test_a_cancelled_token_ends_the_wait_not_the_run(started):
    execution, model = started()
    token = CancellationToken()
    threading.Timer(0.1, token.cancel, args=("the user left",)).start()

    with pytest.raises(CancelledError, match="the user left"):
        execution.run.interject("Are you there?", cancellation_token=token)
    model.release.set()

    assert execution.wait(timeout=30).completed
    assert execution.reply(1, timeout=30).text == "Noted: Are you there?"


def test_a_run_that_ends_without_reading_it_raises(started):
    execution, model = started()
    number = execution.interject("Too late.")
    execution.cancel()
    model.release.set()

    with pytest.raises(AgentInterjectionError, match="ended before a model turn read interjection 1"):
        execution.reply(number, timeout=30)
    assert execution.wait(timeout=30).cancelled


def test_bad_arguments_raise_clear_errors(started):
    execution, model = started()
    for bad in (0, -1, "1", True, 1.0):
        with pytest.raises(InvocationError, match="interjection number"):
            execution.reply(bad)
    with pytest.raises(InvocationError, match="cancellation_token"):
        execution.reply(1, cancellation_token="soon")
    with pytest.raises(InvocationError, match="timeout"):
        execution.run.interject("x", timeout=-1)
    with pytest.raises(RunNotFoundError, match="no interjection number 7"):
        execution.reply(7, timeout=1)
    for beyond in (2**31, 2**63, 10**20):  # past the store's integers: unknown, not a driver error
        with pytest.raises(RunNotFoundError, match=f"no interjection number {beyond}"):
            execution.reply(beyond, timeout=0)
    with pytest.raises(InvocationError, match="non-empty user message"):
        execution.run.interject("   ")
    model.release.set()
    execution.wait(timeout=30)


def test_run_interject_before_the_start_and_after_the_end(config, script):
    agent = type("DoneAgent", (Agent,), {"model": script([{"text": "Done."}])})
    dormant = agent.build_run("Hello.")
    with pytest.raises(AgentInterjectionError, match="has not started"):
        dormant.interject("Wait.")

    run = agent.ask("Hello.")
    with pytest.raises(AgentInterjectionError, match="has finished"):
        run.interject("Too late.")
