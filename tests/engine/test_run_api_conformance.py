"""Run API conformance (spec/run-api.md): cleanup, bad options, hooks, threads and RunContext."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from datetime import UTC, datetime, timedelta

import pytest

import lg_core
from lg_core import (
    Agent,
    CancellationToken,
    Configuration,
    Hook,
    RunContext,
    Tool,
    with_configuration,
)
from lg_core.errors import CancelledError, ConfigurationError, DeadlineExceededError


def agent_for(target, **attributes):
    return type("RunApiAgent", (Agent,), {"model": target, **attributes})


# -- close: "It attempts every closer and then raises ..." ---------------------------------------


@pytest.mark.parametrize("control_flow", [CancelledError, DeadlineExceededError])
def test_close_attempts_every_closer_when_one_raises_a_cancellation(config, script, control_flow):
    """A closer that checks a cancelled token raises CancelledError, a BaseException
    here (not a Ruby StandardError): the closers after it must still run."""
    closed = []

    def checks_the_token():
        raise control_flow("the run was cancelled")

    run = agent_for(script([{"text": "ok"}])).stream_ask("Hi")
    run.register(closer=lambda: closed.append("database"))
    run.register(closer=checks_the_token)
    run.register(closer=lambda: closed.append("tempdir"))

    with pytest.raises(control_flow):
        list(run)

    assert closed == ["tempdir", "database"]
    assert run.outcome == "completed"
    assert run.failed, "failed: True after execution or cleanup failed"


# -- bad run options raise before a Run exists -----------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("cancellation_token", "stop-button", "cancellation_token must be a CancellationToken"),
        ("cancellation_token", True, "cancellation_token must be a CancellationToken"),
        ("on_event", 5, "on_event must be callable"),
    ],
)
def test_a_bad_run_option_raises_before_a_run_exists(config, script, option, value, message):
    """'Input, configuration, or resource construction can raise before a Run exists':
    a wrong option must not become a stored run that failed with an AttributeError."""
    agent = agent_for(script([{"text": "ok"}]))

    with pytest.raises(TypeError, match=message):
        agent.ask("Hi", **{option: value})

    assert lg_core.list_runs() == []


@pytest.mark.parametrize("runtime", ["default", Configuration])
def test_a_runtime_option_that_is_not_a_runtime_raises_type_error(config, script, runtime):
    """Passing the Configuration (or anything else) as runtime= raised
    "AttributeError: 'Configuration' object has no attribute 'resolver'"."""
    value = Configuration() if runtime is Configuration else runtime
    agent = agent_for(script([{"text": "ok"}]))

    with pytest.raises(TypeError, match=r"runtime must be a Runtime .*configuration\.runtime\(\)"):
        agent.ask("Hi", runtime=value)
    assert agent.ask("Hi", runtime=config.runtime()).completed


def test_a_cancellation_token_is_accepted_and_the_run_gets_a_child_of_it(config, script):
    """The run's own token is a child of the caller's: cancelling the caller's stops the
    run (test below), cancelling the run's leaves the caller's alone."""
    token = CancellationToken()
    run = agent_for(script([{"text": "ok"}])).ask("Hi", cancellation_token=token)

    assert run.completed
    run.cancellation_token.cancel()
    assert not token.cancelled
    token.cancel()
    assert agent_for(script([{"text": "ok"}])).ask("Hi", cancellation_token=token).cancellation_token.cancelled


# -- a build that stops halfway closes what it registered -----------------------------------------


class RegisteringHook(Hook):
    closed: list = []

    def prepare_run(self, run):
        run.register(closer=lambda: self.closed.append(run.id))
        return run


class FailingHook(Hook):
    def prepare_run(self, run):
        raise ConfigurationError("the tenant's vault is unreachable")


def test_a_failing_prepare_run_hook_closes_the_resources_registered_before_it(script):
    """Runtime: 'if construction stops halfway through, Runtime closes the partial resources'."""
    RegisteringHook.closed = []
    configuration = Configuration(hooks=[RegisteringHook, FailingHook])
    with with_configuration(configuration):
        agent = agent_for(script([{"text": "ok"}]))
        with pytest.raises(ConfigurationError, match="vault"):
            agent.ask("Hi")
        assert lg_core.list_runs() == []
    configuration.close()

    assert len(RegisteringHook.closed) == 1


class NotARunHook(Hook):
    def prepare_run(self, run):
        run.register(closer=lambda: RegisteringHook.closed.append("not-a-run"))
        return True


def test_a_prepare_run_hook_returning_something_else_than_the_run_raises_configuration_error(script):
    """Runtime::Hook: "return the supplied value when leaving it unchanged". A hook that
    returned True made ask fail with "AttributeError: 'bool' object has no attribute 'call'",
    and what the hooks had registered was never closed."""
    RegisteringHook.closed = []
    configuration = Configuration(hooks=[RegisteringHook, NotARunHook])
    with with_configuration(configuration):
        with pytest.raises(ConfigurationError, match=r"NotARunHook\.prepare_run must return the Run .* got bool"):
            agent_for(script([{"text": "ok"}])).ask("Hi")
    configuration.close()

    assert sorted(RegisteringHook.closed, key=str)[-1] == "not-a-run" and len(RegisteringHook.closed) == 2


# -- stream_ask runs in the caller's context, as ask does -------------------------------------------

REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


class ContextReadingTool(Tool):
    tool_name = "read_context"
    description = "Reports what the caller's context holds."
    seen: list = []

    def call(self, input):
        self.seen.append((REQUEST_ID.get(), lg_core.current_configuration() is self.runtime.configuration))
        return "read"


@pytest.mark.parametrize("entry", ["ask", "stream_ask", "stream_ask_async", "start_execution"])
def test_a_tool_sees_the_callers_context_under_every_entry_point(config, script, entry):
    """The spec: stream_ask 'runs on the caller's fiber or thread'. Its steps executed on a
    fresh thread without the caller's context variables, so a tool saw the process default
    configuration (not with_configuration's) and none of the application's context."""
    ContextReadingTool.seen = []
    turns = [{"tool_calls": [{"name": "read_context", "arguments": {}}]}, {"text": "Done."}]
    agent = agent_for(script(turns), tools=[ContextReadingTool])
    token = REQUEST_ID.set("req-481")
    try:
        run = _run_through(entry, agent)
    finally:
        REQUEST_ID.reset(token)

    assert run.completed
    assert ContextReadingTool.seen == [("req-481", True)]


def _run_through(entry, agent):
    if entry == "ask":
        return agent.ask("Go")
    if entry == "stream_ask":
        run = agent.stream_ask("Go")
        list(run)
        return run
    if entry == "start_execution":
        return agent.start_execution("Go").wait(30)

    async def consume():
        stream = agent.stream_ask_async("Go")
        _events = [event async for event in stream]
        return stream.run

    return asyncio.run(consume())


@pytest.mark.parametrize("entry", ["ask", "stream_ask", "start_execution"])
def test_parallel_tool_calls_see_the_callers_context_like_a_single_call(config, script, entry):
    """A turn's parallel calls run on the dispatcher's pool threads; they saw neither
    with_configuration nor the caller's context variables, unlike a lone call."""
    ContextReadingTool.seen = []
    calls = [{"name": "read_context", "id": f"c{i}", "arguments": {}} for i in range(2)]
    agent = agent_for(script([{"tool_calls": calls}, {"text": "Done."}]), tools=[ContextReadingTool])
    token = REQUEST_ID.set("req-481")
    try:
        run = _run_through(entry, agent)
    finally:
        REQUEST_ID.reset(token)

    assert run.completed
    assert ContextReadingTool.seen == [("req-481", True), ("req-481", True)]


def test_a_closer_cancellation_in_a_threaded_execution_is_raised_by_wait_not_the_thread(config, script, monkeypatch):
    """The execution thread keeps a cleanup failure for Execution.wait; a CancelledError
    (a BaseException here) escaped that thread as an unhandled exception instead."""
    crashed = []
    monkeypatch.setattr(threading, "excepthook", lambda args: crashed.append(args.exc_value))

    def checks_the_token():
        raise CancelledError("the run was cancelled")

    run = agent_for(script([{"text": "ok"}])).build_run("Hi")  # what start_execution builds
    run.register(closer=checks_the_token)
    execution = run.runtime.start_execution(run)

    with pytest.raises(CancelledError):
        execution.wait(30)
    assert crashed == []


# -- a consumer that stops at the terminal event does not cancel anything ---------------------------


@pytest.mark.parametrize("entry", ["stream_ask", "stream_ask_async"])
def test_stopping_the_stream_at_its_terminal_event_leaves_the_callers_token_alone(config, script, entry):
    """The run's thread may still be publishing the terminal event to the engine's other
    sinks (a Redis Stream) when the consumer breaks out on it; the finished run was then
    'cancelled' through the caller's token, which may be shared with the caller's next runs."""
    token = CancellationToken()

    class SlowSink:
        def publish(self, run_id, event):
            if event.terminal:
                token.wait(1)  # still publishing when the consumer has stopped reading

    config.runtime().engine.add_sink(SlowSink())
    agent = agent_for(script([{"text": "ok"}]))
    if entry == "stream_ask":
        run = agent.stream_ask("Hi", cancellation_token=token)
        for event in run:
            if event.terminal:
                break
    else:
        run = asyncio.run(_read_to_the_terminal_event(agent, token))

    assert run.completed
    assert not token.cancelled


async def _read_to_the_terminal_event(agent, token):
    stream = agent.stream_ask_async("Hi", cancellation_token=token)
    events = aiter(stream)
    async for event in events:
        if event.terminal:
            break
    await events.aclose()  # what leaving the loop does once the generator is collected
    return stream.run


# -- RunContext refuses values its checks cannot use ------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("deadline", 5.0, "deadline must be a datetime"),
        ("deadline", "2030-01-01T00:00:00Z", "deadline must be a datetime"),
        ("cancellation_token", "stop", "cancellation_token must be a CancellationToken"),
    ],
)
def test_run_context_refuses_a_deadline_or_token_of_the_wrong_type(option, value, message):
    """RunContext(deadline=5.0) was accepted and check() then failed with
    "AttributeError: 'float' object has no attribute 'timestamp'" inside the tool under test."""
    with pytest.raises(TypeError, match=message):
        RunContext(**{option: value})


def test_run_context_accepts_a_datetime_deadline_and_a_token():
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    token = CancellationToken()
    context = RunContext(deadline=deadline, cancellation_token=token)

    context.check()
    assert context.deadline == deadline and context.cancellation_token is token


def test_a_consumer_failing_on_the_terminal_event_leaves_the_callers_token_alone(config, script):
    """Nothing is left to stop once the run has ended; the caller's token may serve its next runs."""
    from lg_core import CancellationToken

    token = CancellationToken()

    def on_event(event):
        if event.terminal:
            raise ValueError("the consumer broke on the last event")

    with pytest.raises(ValueError, match="last event"):
        agent_for(script([{"text": "ok"}])).ask("Hi", cancellation_token=token, on_event=on_event)
    assert not token.cancelled
    assert agent_for(script([{"text": "again"}])).ask("Hi", cancellation_token=token).outcome == "completed"


# -- a run stopping itself leaves the caller's token alone ------------------------------------------
#
# CancellationToken: "Cancellation is idempotent and flows only downward." A Run given the
# caller's token stops when that token is cancelled; the run stopping itself (cancel(), a
# consumer that failed or stopped reading mid-run) cancelled the caller's token instead,
# so every later run the caller started with it (a web request's token) was cancelled at once.


class _StopTool(Tool):
    tool_name = "stop"
    description = "Stop the run."

    def call(self, input):
        self.run.cancel("the user closed the chat")
        return "stopping"


def _tool_then_text(script, name):
    return script([{"tool_calls": [{"name": name, "arguments": {}}]}, {"text": "Done."}])


def test_a_run_cancelling_itself_leaves_the_callers_token_alone(config, script):
    token = CancellationToken()

    run = agent_for(_tool_then_text(script, "stop"), tools=[_StopTool]).ask("Go", cancellation_token=token)

    assert run.outcome == "cancelled" and "the user closed the chat" in str(run.error)
    assert run.cancellation_token.cancelled and not token.cancelled
    assert agent_for(script([{"text": "again"}])).ask("Hi", cancellation_token=token).completed


def test_a_consumer_failing_mid_run_leaves_the_callers_token_alone(config, script):
    token = CancellationToken()

    def on_event(event):
        if event.type == "text_delta":
            raise ValueError("the client went away")

    with pytest.raises(ValueError, match="went away"):
        agent_for(script([{"text": "Refunds take 30 days."}])).ask("Hi", cancellation_token=token, on_event=on_event)
    assert not token.cancelled
    assert agent_for(script([{"text": "again"}])).ask("Hi", cancellation_token=token).completed


def test_leaving_a_stream_mid_run_stops_the_run_but_not_the_callers_token(config, script):
    token = CancellationToken()
    run = agent_for(script([{"text": "one two three four", "delta_delay": 0.2}])).stream_ask(
        "Hi", cancellation_token=token
    )

    for event in run:
        if event.type == "text_delta":
            break

    assert run.outcome == "cancelled"
    assert not token.cancelled


def test_cancelling_the_callers_token_still_cancels_the_run(config, script):
    token = CancellationToken()

    def on_event(event):
        if event.type == "text_delta":
            token.cancel("the caller gave up")

    run = agent_for(script([{"text": "one two three four", "delta_delay": 0.2}])).ask(
        "Hi", cancellation_token=token, on_event=on_event
    )

    assert run.outcome == "cancelled" and "the caller gave up" in str(run.error)
