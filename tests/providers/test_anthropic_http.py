"""The anthropic adapter against a local server speaking Anthropic's streaming format over real HTTP.

Every test runs whole agent runs (``ask`` / ``stream_ask``) through the engine,
so what is checked is what a user sees: events, outcomes, errors, usage, and
what the server received.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from lg_core import (
    Agent,
    Artifact,
    ConfigurationError,
    ContextWindowOverflowError,
    CredentialError,
    DeadlineExceededError,
    HTTPError,
    MalformedToolCallError,
    OutputLimitError,
    ProtocolError,
    Tool,
    ToolError,
    configure,
)
from lg_core.content import Image, Reasoning, Text
from lg_core.messages import Message
from lg_core.providers import AnthropicProvider
from tests.providers.anthropic_server import (
    MESSAGE_ID,
    MESSAGE_STOP,
    MODEL,
    REQUEST_ID,
    delta,
    drop_after,
    encode,
    error,
    error_event,
    html_reply,
    json_reply,
    keep_alive,
    message,
    message_delta,
    message_start,
    serve,
    stall_headers,
    stream,
    text_block,
    text_message,
    thinking_block,
    tool_block,
    tool_message,
)

KEY = "sk-ant-api03-Zq7t0psecret"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def server():
    yield from serve()


@pytest.fixture
def connection(config, server):
    """A connection named ``anthropic`` to the local server, so agents name ``anthropic:<model>``."""
    configure(
        providers={
            "anthropic": {
                "adapter": "anthropic",
                "base_url": server.base_url,
                "api_key": KEY,
                "allow_insecure_http": True,
                "headers": {"anthropic-beta": "fine-grained-tool-streaming-2025-05-14"},
            }
        }
    )
    return server


class SupportAgent(Agent):
    model = "anthropic:claude-sonnet-4-5"
    system_prompt = "Answer briefly."


LOOKUP_SCHEMA = {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}


class LookupTool(Tool):
    description = "Look up a help center entry by topic."
    input_schema = LOOKUP_SCHEMA

    def call(self, input):
        if input["topic"] == "secrets":
            raise ToolError("that topic is not in the help center")
        return f"entry for {input['topic']}"


class ToolAgent(SupportAgent):
    tools = [LookupTool]


def lookup(call_id, topic, split_at=10):
    arguments = json.dumps({"topic": topic})
    return (call_id, "lookup", [arguments[:split_at], arguments[split_at:]])


def types(run):
    return [event.type for event in run.events()]


# -- answers -----------------------------------------------------------------------------------------


def test_a_streamed_answer_completes_the_run_with_its_usage(connection):
    connection.reply(stream(text_message("Refunds take ", "30 days.", usage=(40, 7))))

    run = SupportAgent.ask("How long do refunds take?", settings={"temperature": 0.2, "max_tokens": 200})

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds take 30 days."
    assert (run.usage.input_tokens, run.usage.output_tokens) == (40, 7)
    [received] = connection.received
    assert received.path == "/v1/messages"
    assert received.headers["x-api-key"] == KEY
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert received.headers["anthropic-beta"] == "fine-grained-tool-streaming-2025-05-14"
    assert "authorization" not in received.headers
    assert received.body == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 200,
        "system": "Answer briefly.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "How long do refunds take?"}]}],
        "stream": True,
        "temperature": 0.2,
    }


def test_max_tokens_has_a_default_because_the_api_requires_it(connection):
    connection.reply(stream(text_message("ok")))

    SupportAgent.ask("Hi")

    assert connection.received[0].body["max_tokens"] == 4096


def test_stream_ask_yields_the_text_deltas_in_order(connection):
    pieces = ["Re", "funds ", "take ", "thirty ", "days", "."]
    connection.reply(stream(text_message(*pieces)))

    run = SupportAgent.stream_ask("How long?")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert [e.data["text"] for e in events if e.type == "text_delta"] == pieces
    kinds = [e.type for e in events]
    assert kinds.index("message_start") < kinds.index("text_delta") < kinds.index("usage") < kinds.index("message_stop")
    stop = next(e for e in events if e.type == "message_stop")
    response = stop.data["response"]
    assert response.metadata["id"] == MESSAGE_ID
    assert response.metadata["provider_model"] == MODEL


def test_cache_reads_and_writes_are_reported_apart_from_uncached_input(connection):
    connection.reply(stream(message(text_block(0, "ok"), usage=(12, 9), cache_read=3000, cache_write=512)))

    usage = SupportAgent.ask("Hi").usage

    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens) == (12, 3000, 512, 9)
    assert usage.total_tokens == 12 + 3000 + 512 + 9


def test_thinking_streams_as_reasoning_and_goes_back_signed_with_the_tool_result(connection):
    """With extended thinking and tools, Anthropic requires the turn's thinking block, signature
    and all, in the assistant message that the tool results answer."""
    thinking = thinking_block(0, "The user asks about ", "refunds; look it up.", signature="EqQBCgIYAhIMsig")
    connection.reply(
        stream(message([*thinking, *tool_block(1, "toolu_01A", "lookup", ['{"topic": "refunds"}'])], stop_reason="tool_use")),
        stream(text_message("Refunds take 30 days.")),
    )
    settings = {"max_tokens": 16000, "thinking": {"type": "enabled", "budget_tokens": 10000}}

    run = ToolAgent.stream_ask("Can I get a refund?", settings=settings)
    events = list(run)

    assert run.outcome == "completed", run.error
    assert [e.data["text"] for e in events if e.type == "reasoning_delta"] == ["The user asks about ", "refunds; look it up."]
    first, second = connection.received
    assert first.body["thinking"] == {"type": "enabled", "budget_tokens": 10000}
    assistant = second.body["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "The user asks about refunds; look it up.", "signature": "EqQBCgIYAhIMsig"},
            {"type": "tool_use", "id": "toolu_01A", "name": "lookup", "input": {"topic": "refunds"}},
        ],
    }
    stored = run.result.messages[1].content[0]
    assert stored == Reasoning(text="The user asks about refunds; look it up.", signature="EqQBCgIYAhIMsig")


def test_a_refusal_ends_the_turn_as_content_filter_with_what_was_said(connection):
    connection.reply(stream(message(text_block(0, "I can't help with that."), stop_reason="refusal")))

    run = SupportAgent.stream_ask("Hi")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "I can't help with that."
    assert next(e for e in events if e.type == "message_stop").data["stop_reason"] == "content_filter"


# -- tools -------------------------------------------------------------------------------------------


def test_a_tool_call_runs_the_tool_and_its_result_goes_back_as_a_tool_result_block(connection):
    connection.reply(
        stream(tool_message(lookup("toolu_01Abc", "refunds", split_at=5), text="Let me check.")),
        stream(text_message("Refunds: entry for refunds.")),
    )

    run = ToolAgent.stream_ask("Can I get a refund?")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds: entry for refunds."
    call_events = [(e.type, dict(e.data)) for e in events if e.data.get("id") == "toolu_01Abc"]
    assert [kind for kind, _ in call_events][:3] == ["tool_call_start", "tool_call_delta", "tool_call_delta"]
    assert "".join(d["arguments"] for kind, d in call_events if kind == "tool_call_delta") == '{"topic": "refunds"}'
    assert ("tool_call_stop", {"id": "toolu_01Abc", "name": "lookup", "input": {"topic": "refunds"}}) in call_events
    first, second = connection.received
    assert first.body["tools"] == [
        {"name": "lookup", "description": "Look up a help center entry by topic.", "input_schema": LOOKUP_SCHEMA}
    ]
    assert second.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01Abc", "name": "lookup", "input": {"topic": "refunds"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01Abc", "content": [{"type": "text", "text": "entry for refunds"}]}],
        },
    ]
    assert run.usage.input_tokens == 40 + 25


def test_parallel_tool_calls_are_answered_in_one_user_message_and_an_error_says_so(connection):
    connection.reply(
        stream(tool_message(lookup("toolu_1", "refunds"), lookup("toolu_2", "secrets"))),
        stream(text_message("One answered.")),
    )

    run = ToolAgent.ask("Refunds and secrets?")

    assert run.outcome == "completed", run.error
    results = connection.received[1].body["messages"][-1]
    assert results["role"] == "user"
    assert sorted((block["tool_use_id"], block.get("is_error", False)) for block in results["content"]) == [
        ("toolu_1", False),
        ("toolu_2", True),
    ]
    failed = next(block for block in results["content"] if block["tool_use_id"] == "toolu_2")
    assert "not in the help center" in failed["content"][0]["text"]


class ScreenshotTool(Tool):
    description = "Take a screenshot of the customer's order page."
    input_schema = {"type": "object", "properties": {}}

    def call(self, input):
        return Tool.Result("Screenshot taken.", artifacts=(Artifact(media_type="image/png", data=PNG, name="order.png"),))


class ScreenshotAgent(SupportAgent):
    tools = [ScreenshotTool]


def test_an_image_a_tool_returns_goes_inside_its_tool_result(connection):
    connection.reply(
        stream(tool_message(("toolu_s", "screenshot", ["{}"]))),
        stream(text_message("The order shows as shipped.")),
    )

    run = ScreenshotAgent.ask("What does my order page say?")

    assert run.outcome == "completed", run.error
    [result] = connection.received[1].body["messages"][-1]["content"]
    assert result["tool_use_id"] == "toolu_s"
    assert {"type": "text", "text": "Screenshot taken."} in result["content"]
    assert {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}} in result["content"]


def test_a_tool_call_without_input_deltas_uses_the_input_it_started_with(connection):
    """A call to a tool without parameters may come with no ``input_json_delta`` at all."""
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_e", "name": "screenshot", "input": {}}}
    connection.reply(
        stream(message([start, {"type": "content_block_stop", "index": 0}], stop_reason="tool_use")),
        stream(text_message("Done.")),
    )

    run = ScreenshotAgent.ask("Screenshot please.")

    assert run.outcome == "completed", run.error
    assert connection.received[1].body["messages"][1]["content"] == [{"type": "tool_use", "id": "toolu_e", "name": "screenshot", "input": {}}]


def test_an_image_the_user_sends_reaches_the_model(connection):
    connection.reply(stream(text_message("A PNG header.")))
    question = Message(role="user", content=[Text(text="What is this?"), Image(data=PNG, media_type="image/png")])

    run = SupportAgent.ask(question)

    assert run.outcome == "completed", run.error
    assert connection.received[0].body["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
    ]


def test_an_image_type_claude_cannot_read_fails_the_run_before_any_request(connection):
    question = Message(role="user", content=[Text(text="What is this?"), Image(data=b"BM", media_type="image/bmp", name="scan.bmp")])

    run = SupportAgent.ask(question)

    assert run.outcome == "failed"
    assert "image 'scan.bmp' of type 'image/bmp'" in str(run.error)
    assert "image/png" in str(run.error)
    assert connection.received == []


# -- structured results ------------------------------------------------------------------------------

TRIAGE = {
    "type": "object",
    "properties": {"category": {"type": "string"}, "urgent": {"type": "boolean"}},
    "required": ["category", "urgent"],
    "additionalProperties": False,
}


class TriageAgent(SupportAgent):
    result_schema = TRIAGE


def test_a_result_schema_is_submitted_through_a_tool_by_default(connection):
    """Native structured output is off unless the connection says the model has it: every Claude model takes tools."""
    answer = json.dumps({"category": "delivery", "urgent": True})
    connection.reply(stream(tool_message(("toolu_r", "submit_result", [answer[:12], answer[12:]]))))

    run = TriageAgent.ask("My package is missing.")

    assert run.outcome == "completed", run.error
    assert run.result.output == {"category": "delivery", "urgent": True}
    body = connection.received[0].body
    assert [tool["name"] for tool in body["tools"]] == ["submit_result"]
    assert body["tools"][0]["input_schema"] == TRIAGE
    assert "output_config" not in body


def test_native_structured_output_is_sent_as_output_config_when_the_connection_enables_it(config, server):
    configure(
        providers={
            "anthropic": {
                "adapter": "anthropic", "base_url": server.base_url, "api_key": KEY, "allow_insecure_http": True,
                "capabilities": {"native_structured_output": True},
            }
        }
    )
    answer = json.dumps({"category": "billing", "urgent": False})
    server.reply(stream(text_message(answer[:10], answer[10:])))

    run = TriageAgent.ask("I was charged twice.", settings={"output_config": {"effort": "low"}})

    assert run.outcome == "completed", run.error
    assert run.result.output == {"category": "billing", "urgent": False}
    body = server.received[0].body
    assert body["output_config"] == {"effort": "low", "format": {"type": "json_schema", "schema": TRIAGE}}
    assert "tools" not in body


# -- errors and retries ------------------------------------------------------------------------------


def test_an_overloaded_answer_is_retried_and_announced_with_model_retry(connection):
    connection.reply(error(529, "overloaded_error", "Overloaded"), stream(text_message("Done.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Done."
    assert len(connection.received) == 2
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert retry.data["error_class"] == "HTTPError"
    assert "529 Overloaded: Overloaded (overloaded_error)" in retry.data["message"]


def test_a_rate_limit_that_keeps_refusing_fails_the_run_with_the_wait_it_asked_for(connection):
    connection.reply(*[error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", headers={"retry-after": "0.2"}) for _ in range(3)])

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError)
    assert (run.error.status, run.error.retryable, run.error.retry_after) == (429, True, 0.2)
    assert run.error.error_type == "rate_limit_error"
    assert types(run).count("model_retry") == 2
    assert len(connection.received) == 3


def test_an_api_error_is_retried(connection):
    connection.reply(error(500, "api_error", "Internal server error"), stream(text_message("Done.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert len(connection.received) == 2


@pytest.mark.parametrize(
    ("status", "kind", "text", "phrase"),
    [
        (400, "invalid_request_error", "messages.0.content: Input should be a valid list", "400 Bad Request"),
        (401, "authentication_error", f"invalid x-api-key: {KEY}", "401 Unauthorized"),
        (403, "permission_error", "Your API key does not have permission to use the specified resource.", "403 Forbidden"),
        (404, "not_found_error", "model: claude-sonnet-4-6-typo", "404 Not Found"),
    ],
)
def test_a_refused_request_fails_the_run_at_once_with_the_servers_message_and_never_the_key(connection, status, kind, text, phrase):
    connection.reply(error(status, kind, text))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError)
    assert (run.error.status, run.error.retryable, run.error.error_type, run.error.request_id) == (status, False, kind, REQUEST_ID)
    assert phrase in str(run.error)
    assert text.replace(KEY, "[redacted]").rstrip(".") in str(run.error)
    assert KEY not in str(run.error) and KEY not in run.error.body
    assert len(connection.received) == 1
    assert "model_retry" not in types(run)


def test_a_prompt_longer_than_the_context_window_is_a_context_window_overflow(connection):
    connection.reply(error(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ContextWindowOverflowError
    assert "208310 tokens > 200000 maximum" in str(run.error)
    assert run.error.retryable is False


def test_an_error_event_mid_stream_is_retried_when_overloaded(connection):
    partial = [*text_message("Partial ")[:4], error_event("overloaded_error", "Overloaded")]
    connection.reply(stream(partial), stream(text_message("Full answer.")))

    run = SupportAgent.stream_ask("Hi")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    retry = next(e for e in events if e.type == "model_retry")
    assert retry.data["partial_text"] is True
    assert retry.data["error_class"] == "ProviderError"
    assert "reported an error mid-stream: Overloaded (overloaded_error)" in retry.data["message"]


def test_an_invalid_request_error_mid_stream_fails_the_run(connection):
    connection.reply(stream([*text_message("Hel")[:3], error_event("invalid_request_error", "Output blocked by content filtering policy")]))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert "Output blocked by content filtering policy" in str(run.error)
    assert run.error.retryable is False
    assert len(connection.received) == 1


def test_a_connection_dropped_mid_stream_is_retried(connection):
    connection.reply(drop_after(text_message("Partial ", "answ")[:5]), stream(text_message("Full answer.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    assert "the connection to provider connection 'anthropic'" in next(e for e in run.events() if e.type == "model_retry").data["message"]


# -- malformed streams ----------------------------------------------------------------------------------


def test_an_event_that_is_not_json_fails_the_run_with_a_protocol_error(connection):
    connection.reply(stream([*text_message("Hel")[:4], b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,\n\n']))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProtocolError
    assert "not JSON" in str(run.error)
    assert len(connection.received) == 1


def test_a_stream_that_ends_before_message_stop_is_retried(connection):
    """The server closed the body cleanly but early: the answer is incomplete, and another try may finish it."""
    connection.reply(stream(text_message("Partial ", "answ")[:5]), stream(text_message("Full answer.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert "ended before the response was complete (no message_stop)" in retry.data["message"]


def test_a_stream_that_keeps_ending_early_fails_the_run_after_the_retries(connection):
    connection.reply(*[stream(text_message("Part")[:4]) for _ in range(3)])

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError) and run.error.retryable and run.error.status is None
    assert len(connection.received) == 3


def test_a_message_with_no_content_and_no_stop_reason_is_retried_not_completed_empty(connection):
    connection.reply(stream([message_start(), MESSAGE_STOP]), stream(text_message("Full answer.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert retry.data["error_class"] == "ProtocolError"
    assert "ended without an answer" in retry.data["message"]


def test_a_delta_for_a_block_that_never_started_is_a_protocol_error(connection):
    connection.reply(stream([message_start(), delta(3, type="text_delta", text="stray"), message_delta("end_turn", 1), MESSAGE_STOP]))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ProtocolError
    assert "content block 3, which it never started" in str(run.error)


def test_tool_input_that_is_not_json_fails_the_run_as_a_malformed_tool_call(connection):
    connection.reply(stream(tool_message(("toolu_1", "lookup", ['{"topic": ', "refunds}"]))))

    run = ToolAgent.ask("Refunds?")

    assert run.outcome == "failed"
    assert type(run.error) is MalformedToolCallError
    assert "lookup" in str(run.error)


def test_a_tool_call_cut_off_by_max_tokens_is_an_output_limit_error(connection):
    blocks = tool_block(0, "toolu_1", "lookup", ['{"topic": ', '"refu'])
    connection.reply(stream(message(blocks, stop_reason="max_tokens")))

    run = ToolAgent.ask("Refunds?", settings={"max_tokens": 8})

    assert run.outcome == "failed"
    assert type(run.error) is OutputLimitError
    assert "lookup" in str(run.error) and "max_tokens" in str(run.error)
    assert len(connection.received) == 1


def test_a_json_answer_instead_of_a_stream_is_a_protocol_error_keeping_its_message(connection):
    """A proxy that ignored ``stream: true``, or answered an error with 200."""
    payload = {"type": "error", "error": {"type": "invalid_request_error", "message": f"bad key {KEY}"}}
    connection.reply(json_reply(200, payload))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ProtocolError
    assert "did not answer with an event stream (status 200): bad key [redacted]" in str(run.error)


def test_a_proxys_error_page_is_an_http_error_quoting_it(connection):
    connection.reply(*[html_reply(502, "<html><body>502 Bad Gateway</body></html>") for _ in range(3)])

    run = SupportAgent.ask("Hi")

    assert isinstance(run.error, HTTPError)
    assert (run.error.status, run.error.retryable) == (502, True)
    assert "<html><body>502 Bad Gateway</body></html>" in str(run.error)


# -- cancellation, deadlines and credentials --------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_cancelling_mid_stream_stops_the_run_between_events(connection):
    released = threading.Event()
    connection.reply(stream(text_message("First ", "second ", "third."), hold=released, hold_after=4))

    run = SupportAgent.stream_ask("Hi")
    seen = []
    try:
        for event in run:
            seen.append(event.type)
            if event.type == "text_delta":
                run.cancel("user left")
    finally:
        released.set()

    assert run.outcome == "cancelled"
    assert seen.count("text_delta") == 1
    assert "message_stop" not in seen


@pytest.mark.timeout(60)
def test_a_deadline_ends_a_stream_kept_alive_by_pings(connection):
    answered = threading.Event()
    connection.reply(keep_alive(text_message("Too late."), until=answered, after=2))
    try:
        run = SupportAgent.ask("Hi", deadline=0.5)
    finally:
        answered.set()

    assert run.outcome == "partial"
    assert isinstance(run.error, DeadlineExceededError)
    assert "model_retry" not in types(run)


@pytest.mark.timeout(60)
def test_a_deadline_ends_the_wait_for_the_response_headers(connection):
    arrived, released = threading.Event(), threading.Event()
    connection.reply(stall_headers(text_message("Too late."), arrived=arrived, until=released))
    try:
        run = SupportAgent.ask("Hi", deadline=0.5)
    finally:
        released.set()

    assert arrived.is_set()
    assert run.outcome == "partial"
    assert isinstance(run.error, DeadlineExceededError)


def test_a_missing_api_key_fails_the_run_with_a_credential_error_before_any_request(config, server, monkeypatch):
    monkeypatch.delenv("LG_TEST_ANTHROPIC_KEY", raising=False)
    configure(providers={"anthropic": {"adapter": "anthropic", "base_url": server.base_url, "api_key_env": "LG_TEST_ANTHROPIC_KEY", "allow_insecure_http": True}})

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, CredentialError)
    assert "$LG_TEST_ANTHROPIC_KEY" in str(run.error)
    assert server.received == []


def test_a_connection_without_any_key_suggests_anthropics_variable(config, server):
    configure(providers={"anthropic": {"adapter": "anthropic", "base_url": server.base_url, "allow_insecure_http": True}})

    run = SupportAgent.ask("Hi")

    assert isinstance(run.error, CredentialError)
    assert "api_key_env: ANTHROPIC_API_KEY" in str(run.error)


def test_the_key_is_read_from_the_named_environment_variable_and_kept_out_of_reprs(config, server, monkeypatch):
    monkeypatch.setenv("LG_TEST_ANTHROPIC_KEY", "sk-ant-from-env")
    configure(providers={"anthropic": {"adapter": "anthropic", "base_url": server.base_url, "api_key_env": "LG_TEST_ANTHROPIC_KEY", "allow_insecure_http": True, "api_version": "2023-01-01"}})
    server.reply(stream(text_message("ok")))

    assert SupportAgent.ask("Hi").response == "ok"
    assert server.received[0].headers["x-api-key"] == "sk-ant-from-env"
    assert server.received[0].headers["anthropic-version"] == "2023-01-01"
    provider = AnthropicProvider("direct", {"api_key": KEY})
    assert KEY not in repr(provider.settings) and KEY not in repr(provider)


# -- connection options -------------------------------------------------------------------------------


def test_the_default_endpoint_is_anthropics_messages_url(config):
    """The transport is the extension point (CONVENTIONS): an httpx.MockTransport needs no server."""
    body = b"".join(encode(event) for event in text_message("Mocked."))
    seen = []

    def handle(request):
        seen.append((str(request.url), request.headers["x-api-key"]))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    configure(providers={"anthropic": {"adapter": "anthropic", "api_key": KEY, "transport": httpx.MockTransport(handle)}})

    assert SupportAgent.ask("Hi").response == "Mocked."
    assert seen == [("https://api.anthropic.com/v1/messages", KEY)]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"base_url": "http://claude.example.test"}, "plain HTTP"),
        ({"api_version": ""}, "api_version must be a non-empty string"),
        ({"organization": "org-1"}, r"unknown option 'organization'; the anthropic adapter accepts: .*api_version"),
        ({"timeout": -1}, "timeout must be a positive number"),
        ({"capabilities": {"vision": True}}, "capabilities: .*vision"),
    ],
)
def test_bad_connection_options_are_configuration_errors_naming_the_option(config, options, problem):
    configure(providers={"anthropic": {"adapter": "anthropic", "api_key": KEY, **options}})

    with pytest.raises(ConfigurationError, match=problem):
        SupportAgent.ask("Hi")
