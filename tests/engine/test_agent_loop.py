"""The agent loop end to end: model turns, tool calls, limits and provider errors.

Every test drives a real run through the engine with the offline ``scripted``
provider and asserts on what a caller sees: the Run's outcome, response and
error, the conversation in ``run.result.messages``, and the durable event log.
"""

from __future__ import annotations

import json

import pytest

import lg_core
from lg_core import Agent, CancellationToken, Tool, ToolError, Usage, after_model_error, replace
from lg_core.errors import (
    DeadlineExceededError,
    HTTPError,
    MalformedToolCallError,
    OutputLimitError,
    ProviderError,
)

LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"topic": {"type": "string"}},
    "required": ["topic"],
    "additionalProperties": False,
}
ANSWERS = {"refunds": "Refunds are available within 30 days."}


class LookupTool(Tool):
    description = "Look up a help center entry by topic."
    input_schema = LOOKUP_SCHEMA

    def call(self, input):
        return ANSWERS[input["topic"]]


def lookup_call(topic="refunds", **extra):
    return {"name": "lookup", "arguments": {"topic": topic}, **extra}


def agent_for(target, *tool_classes, **attributes):
    """A fresh Agent subclass using ``target`` with ``tool_classes``."""
    namespace = {"model": target, "tools": list(tool_classes), **attributes}
    return type("SupportAgent", (Agent,), namespace)


def tool_message(run, index=2):
    message = run.result.messages[index]
    assert message.role == "tool"
    return message


def event_types(run):
    return [event.type for event in run.events()]


# -- the example ---------------------------------------------------------------


def test_tool_call_then_text_completes_with_summed_usage_and_ordered_messages(config, script):
    target = script(
        [
            {"tool_calls": [lookup_call()], "usage": {"input_tokens": 11, "output_tokens": 3}},
            {
                "text": "Refunds are available within 30 days.",
                "usage": {"input_tokens": 25, "output_tokens": 9},
            },
        ]
    )
    run = agent_for(target, LookupTool).ask("Can I get a refund?")

    assert run.outcome == "completed"
    assert run.completed and not run.failed and run.error is None
    assert run.response == "Refunds are available within 30 days."
    assert run.usage == Usage(input_tokens=36, output_tokens=12)
    assert run.result.usage == run.usage
    assert run.result.stop_reason == "end_turn"

    roles = [message.role for message in run.result.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    user, call, results, answer = run.result.messages
    assert user.text == "Can I get a refund?"
    [use] = call.tool_uses
    assert (use.name, use.input) == ("lookup", {"topic": "refunds"})
    [result] = results.tool_results
    assert result.tool_use_id == use.id
    assert result.status == "success"
    assert result.text == ANSWERS["refunds"]
    assert answer.text == run.response
    assert run.result.message == answer


def test_stream_ask_yields_provider_and_agent_events_then_one_terminal_run_stop(config, script):
    target = script([{"tool_calls": [lookup_call()]}, {"text": "Refunds are available within 30 days."}])
    run = agent_for(target, LookupTool).stream_ask("Can I get a refund?")
    events = list(run)
    types = [event.type for event in events]

    assert run.outcome == "completed"
    assert types[0] == "invocation_start"
    assert types[-1] == "run_stop"
    terminal = [event for event in events if event.terminal]
    assert [event.type for event in terminal] == ["run_stop"]
    assert types[-2] == "invocation_stop"

    def index(name, start=0):
        return types.index(name, start)

    first_stop = index("message_stop")
    assert (
        index("message_start")
        < index("tool_call_start")
        < index("tool_call_delta")
        < index("tool_call_stop")
        < first_stop
    )
    assert first_stop < index("tool_execution_start") < index("tool_execution_stop")
    second_start = index("message_start", first_stop)
    assert index("tool_execution_stop") < second_start < index("text_delta") < index("message_stop", second_start)
    assert types.count("message_start") == types.count("message_stop") == 2
    assert types.count("text_delta") > 1, "text must stream in more than one delta"

    text = "".join(event.data["text"] for event in events if event.type == "text_delta")
    assert text == run.response == "Refunds are available within 30 days."
    stop = events[-1]
    assert stop.data["outcome"] == "completed"
    assert stop.data["response"] == run.response
    assert stop.data["result"].messages == run.result.messages


def test_iterating_a_run_twice_raises(config, script):
    target = script([{"text": "Hello."}])
    run = agent_for(target).stream_ask("Hi")
    assert [event.type for event in run][-1] == "run_stop"
    with pytest.raises(lg_core.Error, match="only once"):
        list(run)
    assert run.outcome == "completed"


def test_iterating_a_run_returned_by_ask_raises(config, script):
    target = script([{"text": "Hello."}])
    run = agent_for(target).ask("Hi")
    with pytest.raises(lg_core.Error, match="already executed"):
        iter(run)
    with pytest.raises(lg_core.Error):
        run.call()
    assert run.response == "Hello."


# -- tool failures the model can recover from --------------------------------------------


def test_invalid_tool_input_returns_an_error_result_naming_the_field_and_the_run_recovers(config, script):
    target = script(
        [
            {"tool_calls": [{"name": "lookup", "arguments": {"topik": "refunds"}}]},
            {"tool_calls": [lookup_call()]},
            {"text": "Fixed it."},
        ]
    )
    calls = []

    class CountingLookup(LookupTool):
        tool_name = "lookup"

        def call(self, input):
            calls.append(input)
            return super().call(input)

    run = agent_for(target, CountingLookup).ask("Refunds?")

    assert run.outcome == "completed"
    assert run.response == "Fixed it."
    [bad] = tool_message(run, 2).tool_results
    assert bad.status == "error"
    assert "Invalid input for tool 'lookup'" in bad.text
    assert "topic" in bad.text and "topik" in bad.text
    [good] = tool_message(run, 4).tool_results
    assert good.status == "success"
    assert calls == [{"topic": "refunds"}], "the tool must not run with invalid input"
    stops = [e for e in run.events() if e.type == "tool_execution_stop"]
    assert [(e.data["status"], e.data["error_kind"]) for e in stops] == [
        ("error", "validation"),
        ("success", None),
    ]


def test_unknown_tool_returns_an_error_listing_available_tools_and_the_run_recovers(config, script):
    target = script(
        [
            {"tool_calls": [{"name": "refund_everything", "arguments": {}}]},
            {"text": "Sorry, I cannot do that."},
        ]
    )

    class StatusTool(Tool):
        description = "Order status."

        def call(self, input):
            return "shipped"

    run = agent_for(target, LookupTool, StatusTool).ask("Refund me")

    assert run.outcome == "completed"
    [result] = tool_message(run).tool_results
    assert result.status == "error"
    assert "refund_everything" in result.text
    assert "Available tools: lookup, status" in result.text


def test_tool_error_message_is_visible_to_the_model(config, script):
    target = script([{"tool_calls": [lookup_call("shipping")]}, {"text": "That topic is unknown."}])

    class StrictLookup(Tool):
        tool_name = "lookup"
        description = "Look up."
        input_schema = LOOKUP_SCHEMA

        def call(self, input):
            raise ToolError(f"No help center entry for {input['topic']!r}.")

    run = agent_for(target, StrictLookup).ask("Shipping?")

    assert run.outcome == "completed"
    [result] = tool_message(run).tool_results
    assert result.status == "error"
    assert result.text == "No help center entry for 'shipping'."
    assert run.tool_errors == [], "an expected ToolError is not an unexpected failure"


class _LeakyError(RuntimeError):
    pass


def _leaky_tool():
    class LeakyTool(Tool):
        tool_name = "leaky"
        description = "Fails unexpectedly."

        def call(self, input):
            raise _LeakyError("db password is hunter2")

    return LeakyTool


def test_unexpected_tool_exception_shows_only_its_class_name_to_the_model(config, script):
    target = script([{"tool_calls": [{"name": "leaky", "arguments": {}}]}, {"text": "Something went wrong."}])
    run = agent_for(target, _leaky_tool()).ask("Go")

    assert run.outcome == "completed"
    [result] = tool_message(run).tool_results
    assert result.status == "error"
    assert "_LeakyError" in result.text
    assert "hunter2" not in result.text
    assert all("hunter2" not in str(dict(e.data)) for e in run.events()), "the secret leaked into the event log"

    [original] = run.tool_errors
    assert isinstance(original, _LeakyError)
    assert str(original) == "db password is hunter2"
    [diagnostic] = run.diagnostics
    assert diagnostic["kind"] == "tool_error"
    assert diagnostic["tool"] == "leaky"
    assert diagnostic["message"] == "db password is hunter2"
    assert "_LeakyError" in diagnostic["traceback"]


def test_without_capture_diagnostics_no_message_or_traceback_is_kept(config, script):
    target = script([{"tool_calls": [{"name": "leaky", "arguments": {}}]}, {"text": "Something went wrong."}])
    run = agent_for(target, _leaky_tool(), capture_diagnostics=False).ask("Go")

    assert run.outcome == "completed"
    [diagnostic] = run.diagnostics
    assert diagnostic["name"] == "_LeakyError"
    assert not diagnostic.get("message")
    assert "traceback" not in diagnostic
    assert "hunter2" not in repr(diagnostic)
    step = config.runtime().store.load_step(run.id, "root/turn-0/tool/call_0_0")
    assert step is not None and "hunter2" not in repr(step)


def _audited_agent(target, capture, *, at_opening=False):
    def audit(self, payload):
        if at_opening:
            raise _LeakyError("could not audit: " + payload["messages"][-1].text)
        raise _LeakyError("could not audit: " + payload["response"].message.text)

    kind = lg_core.before_invocation if at_opening else lg_core.after_model
    return agent_for(target, capture_diagnostics=capture, audit=kind(audit))


@pytest.mark.parametrize("at_opening", [False, True], ids=["after_model", "before_invocation"])
def test_without_capture_diagnostics_a_run_error_keeps_no_content(config, script, at_opening):
    target = script([{"text": "Customer SSN is 123-45-6789"}])
    run = _audited_agent(target, False, at_opening=at_opening).ask("My SSN is 123-45-6789")

    assert run.outcome == "failed"
    assert "123-45-6789" not in repr(run.diagnostics)
    assert all(d["message"] == "" for d in run.diagnostics)
    assert config.runtime().store.load_run(run.id).error == {
        "class": f"{_LeakyError.__module__}:{_LeakyError.__qualname__}",
        "name": "_LeakyError",
        "message": "",
    }
    assert "123-45-6789" not in repr([dict(e.data) for e in run.events() if e.type == "run_error"])


def test_with_capture_diagnostics_a_run_error_keeps_its_message(config, script):
    target = script([{"text": "Customer note"}])
    run = _audited_agent(target, True).ask("Go")

    assert run.outcome == "failed"
    [diagnostic] = run.diagnostics
    assert diagnostic["kind"] == "run_error"
    assert diagnostic["message"] == "could not audit: Customer note"
    assert config.runtime().store.load_run(run.id).error["message"] == "could not audit: Customer note"


def test_without_capture_diagnostics_a_framework_error_keeps_its_message(config, script):
    target = script([{"tool_calls": [lookup_call(), lookup_call(id="second")]}])
    run = agent_for(target, LookupTool, limits={"max_tool_calls": 1}, capture_diagnostics=False).ask("Go")

    assert isinstance(run.error, OutputLimitError)
    [diagnostic] = run.diagnostics
    assert "max_tool_calls" in diagnostic["message"]


# -- limits --------------------------------------------------------------------------------


def test_exceeding_max_turns_fails_with_output_limit_error(config, script):
    target = script(lambda request: {"tool_calls": [lookup_call()]})
    run = agent_for(target, LookupTool, limits={"max_turns": 3}).ask("Loop forever")

    assert run.outcome == "failed"
    assert isinstance(run.error, OutputLimitError)
    assert "max_turns" in str(run.error) and "3" in str(run.error)
    assert run.response is None
    assert event_types(run).count("message_stop") == 3
    assert event_types(run)[-1] == "run_error"


@pytest.mark.parametrize(
    "turn",
    [
        {"reasoning": "The customer wants a refund; policy says", "text": "", "stop_reason": "max_tokens"},
        {"text": " \n ", "stop_reason": "max_tokens"},
    ],
    ids=["reasoning only", "whitespace only"],
)
def test_a_turn_the_output_limit_stopped_before_any_answer_fails_with_output_limit_error(config, script, turn):
    run = agent_for(script([{**turn, "usage": {"input_tokens": 10, "output_tokens": 400}}]), LookupTool).ask("Refunds?")

    assert run.outcome == "failed"
    assert type(run.error) is OutputLimitError
    assert "before it gave an answer (no text and no tool call)" in str(run.error)
    assert run.usage == Usage(input_tokens=10, output_tokens=400), "the tokens the limit stopped are counted"
    record = config.runtime().store.load_run(run.id)
    assert (record.status, record.error["name"], record.response) == ("failed", "OutputLimitError", None)


def test_text_the_output_limit_cut_off_completes_the_run_with_stop_reason_max_tokens(config, script):
    run = agent_for(script([{"text": "Refunds are available within", "stop_reason": "max_tokens"}])).ask("Refunds?")

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds are available within"
    assert run.result.stop_reason == "max_tokens"


def test_tool_calls_stopped_by_the_output_limit_after_they_were_whole_still_run(config, script):
    target = script([{"tool_calls": [lookup_call()], "stop_reason": "max_tokens"}, {"text": "Thirty days."}])
    run = agent_for(target, LookupTool).ask("Refunds?")

    assert run.outcome == "completed", run.error
    assert event_types(run).count("tool_execution_stop") == 1


def test_exceeding_max_tool_calls_fails_with_output_limit_error(config, script):
    target = script(
        [
            {"tool_calls": [lookup_call(), lookup_call(id="second")]},
            {"tool_calls": [lookup_call(id="third")]},
            {"text": "never reached"},
        ]
    )
    run = agent_for(target, LookupTool, limits={"max_tool_calls": 2}).ask("Many lookups")

    assert run.outcome == "failed"
    assert isinstance(run.error, OutputLimitError)
    assert "max_tool_calls" in str(run.error)
    assert event_types(run).count("tool_execution_stop") == 2, "the first two calls are within the limit"


def test_the_response_exceeding_max_tool_calls_counts_in_the_run_usage(config, script):
    target = script(
        [{"tool_calls": [lookup_call(), lookup_call(id="second")], "usage": {"input_tokens": 10, "output_tokens": 2}}]
    )
    run = agent_for(target, LookupTool, limits={"max_tool_calls": 1}).ask("Many lookups")

    assert run.outcome == "failed"
    assert isinstance(run.error, OutputLimitError)
    assert run.usage == Usage(input_tokens=10, output_tokens=2)
    assert run.events()[-1].data["usage"] == run.usage


def test_tool_output_over_the_limit_is_truncated_in_the_middle(config, script):
    target = script([{"tool_calls": [{"name": "dump", "arguments": {}}]}, {"text": "Done."}])

    class DumpTool(Tool):
        description = "Dump a large log."

        def call(self, input):
            return "HEAD-" + "x" * 5000 + "-TAIL"

    run = agent_for(target, DumpTool, limits={"max_tool_output_tokens": 50}).ask("Dump")

    assert run.outcome == "completed"
    [result] = tool_message(run).tool_results
    text = result.text
    assert text.startswith("HEAD-")
    assert text.endswith("-TAIL")
    assert "truncated" in text
    assert len(text.encode()) <= 50 * 4
    assert result.status == "success"


# -- provider errors ----------------------------------------------------------------------------


def test_scripted_provider_error_fails_the_run_with_provider_error(config, script):
    target = script([{"error": "upstream exploded"}])
    run = agent_for(target).ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProviderError
    assert str(run.error) == "upstream exploded"
    assert run.response is None
    types = event_types(run)
    assert "model_retry" not in types, "a non-retryable error is not retried"
    assert types[-1] == "run_error"
    terminal = run.events()[-1]
    assert terminal.data["error_class"] == "ProviderError"


def test_retryable_rate_limit_is_retried_with_model_retry_then_completes(config, script):
    target = script([{"error": {"kind": "rate_limit", "message": "slow down"}}, {"text": "Recovered."}])
    run = agent_for(target).stream_ask("Hi")
    streamed = list(run)

    assert run.outcome == "completed"
    assert run.response == "Recovered."
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert retry.data["error_class"] == "HTTPError"
    assert retry.data["message"] == "HTTPError: the model provider returned an error."  # the caller-safe default
    assert [d["message"] for d in run.diagnostics if d["kind"] == "model_retry"] == ["slow down"]  # the operator's
    assert retry.data["attempt"] == 2
    assert retry.data["delay"] == 0.25  # the first step of the exponential backoff
    assert [e.type for e in streamed].count("model_retry") == 1


class RecordingToken(CancellationToken):
    """A cancellation token whose waits are written to ``log`` (and end at once).

    The run waits on a child of the token it is given, so children record too.
    """

    def __init__(self, log, parent=None):
        super().__init__(parent)
        self.log = log

    def child(self):
        return RecordingToken(self.log, parent=self)

    def wait(self, timeout):
        self.log.append(("wait", timeout))
        return super().wait(0)


def rate_limited_once(retry_after):
    """Turns: a 429 asking for ``retry_after`` seconds, then an answer."""
    calls = []

    def turns(request):
        calls.append(request)
        if len(calls) == 1:
            raise HTTPError("slow down", status=429, retryable=True, retry_after=retry_after)
        return {"text": "Recovered."}

    return turns


def test_model_retry_is_announced_with_its_delay_before_the_retry_after_wait(config, script):
    log = []

    def on_event(event):
        if event.type == "model_retry":
            log.append(("model_retry", event.data["delay"]))

    run = agent_for(script(rate_limited_once(3))).ask("Hi", on_event=on_event, cancellation_token=RecordingToken(log))

    assert run.outcome == "completed"
    assert run.response == "Recovered."
    assert ("wait", 3.0) in log
    assert log.index(("model_retry", 3.0)) < log.index(("wait", 3.0)), log
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert retry.data["delay"] == 3.0
    assert retry.data["error_class"] == "HTTPError"
    assert retry.data["message"] == "HTTPError: the model provider returned an error."
    assert retry.data["attempt"] == 2
    assert retry.data["partial_text"] is False


def test_a_retry_after_past_the_deadline_is_announced_before_the_run_ends_partial(config, script):
    run = agent_for(script(rate_limited_once(30))).ask("Hi", deadline=0.3)

    assert run.outcome == "partial"
    assert isinstance(run.error, DeadlineExceededError)
    assert "retry" in str(run.error) and "slow down" in str(run.error)
    types = event_types(run)
    assert types.index("model_retry") < types.index("run_partial")
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert retry.data["delay"] == 30.0
    assert retry.data["error_class"] == "HTTPError"


def test_a_retry_after_longer_than_a_turn_waits_fails_the_turn_with_the_providers_error(config, script):
    """A wait past MAX_RETRY_AFTER (60 s) was cut to 60 s and retried into the same refusal."""
    run = agent_for(script(rate_limited_once(600))).ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError) and run.error.retry_after == 600
    assert "model_retry" not in event_types(run)


def test_after_model_error_replacing_the_request_retries_with_the_replacement(config, script):
    seen = []

    def turns(request):
        seen.append(dict(request.settings))
        if request.settings.get("fallback"):
            return {"text": "Answered by the fallback."}
        return {"error": {"kind": "provider", "message": "primary is down"}}

    target = script(turns)

    class FallbackAgent(Agent):
        model = target

        @after_model_error
        def use_fallback(self, payload):
            return replace({**payload, "request": payload["request"].with_settings(fallback=True)})

    run = FallbackAgent.ask("Hi")

    assert run.outcome == "completed"
    assert run.response == "Answered by the fallback."
    assert seen == [{}, {"fallback": True}]
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert retry.data["delay"] == 0  # the replacement is sent at once


def test_after_model_error_replacement_is_bounded_by_the_recovery_limit(config, script):
    attempts = []

    def turns(request):
        attempts.append(request)
        return {"error": "still down"}

    target = script(turns)

    class StubbornAgent(Agent):
        model = target

        @after_model_error
        def retry_forever(self, payload):
            return replace(payload)

    run = StubbornAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, ProviderError)
    assert 1 < len(attempts) <= 4


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "calls, fragment",
    [
        ([{"name": "lookup", "arguments": [1, 2, 3]}], "list arguments"),
        ([{"name": "lookup", "arguments": "{not json"}], "not JSON"),
        ([lookup_call(id="dup"), lookup_call(id="dup")], "same tool call id"),
        # Stored as they came, arguments this deep failed the step's commit: ask() raised and the run stayed running.
        ([{"name": "lookup", "arguments": json.dumps(_nested(250))}], "nested more than 100 levels deep"),
        ([{"name": "lookup", "arguments": "[" * 100_000 + "]" * 100_000}], "not JSON"),  # json.loads: RecursionError
    ],
    ids=["non-object", "not-json", "duplicate-id", "too-deep", "too-deep-to-parse"],
)
def test_malformed_tool_call_fails_with_malformed_tool_call_error(config, script, calls, fragment):
    target = script([{"tool_calls": calls}, {"text": "unreachable"}])
    run = agent_for(target, LookupTool).ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, MalformedToolCallError)
    assert fragment in str(run.error)
    assert "tool_execution_stop" not in event_types(run)
    assert lg_core.get_run(run.id).outcome == "failed"


# -- conversation input and tool forms ----------------------------------------------------------


def test_history_comes_before_the_message_in_the_request_and_the_result(config, script):
    requests = []

    def serve(request):
        requests.append(request)
        return {"text": "Yes, still within 30 days."}

    history = [
        lg_core.Message(role="user", content="I bought shoes last week."),
        lg_core.Message(role="assistant", content="Thanks, noted."),
    ]
    run = agent_for(script(serve)).ask("Can I return them?", history=history)

    assert run.outcome == "completed"
    texts = [m.text for m in requests[0].messages]
    assert texts == ["I bought shoes last week.", "Thanks, noted.", "Can I return them?"]
    assert [m.text for m in run.result.messages] == [*texts, "Yes, still within 30 days."]


def test_an_async_tool_runs_inside_the_loop(config, script):
    import asyncio

    class AsyncLookup(Tool):
        tool_name = "lookup"
        description = "Async lookup."
        input_schema = LOOKUP_SCHEMA

        async def call(self, input):
            await asyncio.sleep(0)
            return {"topic": input["topic"], "answer": ANSWERS[input["topic"]]}

    run = agent_for(script([{"tool_calls": [lookup_call()]}, {"text": "ok"}]), AsyncLookup).ask("Refunds?")

    assert run.outcome == "completed"
    [result] = tool_message(run).tool_results
    assert result.status == "success"
    assert result.text == '{"topic": "refunds", "answer": "Refunds are available within 30 days."}'


def test_a_failure_before_the_first_turn_still_ends_the_stream_with_run_error(config, script):
    calls = []

    def serve(request):
        calls.append(request)
        return {"text": "never"}

    class BrokenStart(Agent):
        model = script(serve)

        @lg_core.before_invocation
        def explode(self, payload):
            raise RuntimeError("cannot load the customer profile")

    run = BrokenStart.stream_ask("Hi")
    types = [event.type for event in run]

    assert types == ["invocation_start", "run_error"]
    assert run.outcome == "failed"
    assert isinstance(run.error, RuntimeError)
    assert calls == []
    assert [e.type for e in run.events()] == types


def test_a_failed_run_keeps_the_usage_of_the_turns_it_completed(config, script):
    target = script(
        [
            {"tool_calls": [lookup_call()], "usage": {"input_tokens": 40, "output_tokens": 4}},
            {"error": "upstream exploded"},
        ]
    )
    run = agent_for(target, LookupTool).ask("Refunds?")

    assert run.outcome == "failed"
    assert run.usage == Usage(input_tokens=40, output_tokens=4)
    assert run.result is None
    assert run.events()[-1].data["usage"] == run.usage


def test_concurrent_asks_of_one_agent_class_are_independent_runs(config, script):
    import contextvars
    import threading

    barrier = threading.Barrier(4, timeout=30)

    class EchoTool(Tool):
        tool_name = "echo"
        description = "Echo the caller."

        def call(self, input):
            barrier.wait()
            return self.run.invocation.actor_id

    def turns(request):
        if request.metadata["sequence"] == 0:
            return {"tool_calls": [{"name": "echo", "arguments": {}}]}
        return {"text": "caller " + request.messages[-1].tool_results[0].text}

    Shared = agent_for(script(turns), EchoTool)
    runs = {}

    def ask(actor):
        runs[actor] = Shared.ask("Who am I?", actor_id=actor)

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(ask, f"user-{n}")) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sorted(runs) == [f"user-{n}" for n in range(4)]
    for actor, run in runs.items():
        assert run.outcome == "completed"
        assert run.response == f"caller {actor}"
    assert len({run.id for run in runs.values()}) == 4
