"""The openai adapter against a local server speaking OpenAI's streaming format over real HTTP.

Every test runs whole agent runs (``ask`` / ``stream_ask``) through the engine,
so what is checked is what a user sees: events, outcomes, errors, usage, and
what the server received.
"""

from __future__ import annotations

import json
import socket
import threading
import time

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
    ProviderError,
    Tool,
    configure,
)
from tests.providers.openai_server import (
    chunk,
    drop_after,
    error,
    json_reply,
    keep_alive,
    serve,
    stall_headers,
    stream,
    text_chunks,
    tool_call_chunks,
    usage_chunk,
)

KEY = "sk-test-Zq7t0psecret"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def server():
    yield from serve()


@pytest.fixture
def connection(config, server):
    """A connection named ``local`` to the local server."""
    configure(
        providers={
            "local": {
                "adapter": "openai",
                "base_url": server.base_url,
                "api_key": KEY,
                "allow_insecure_http": True,
                "organization": "org-test",
                "headers": {"X-Title": "LittleGhost tests"},
            }
        }
    )
    return server


class SupportAgent(Agent):
    model = "local:gpt-4o-mini"
    system_prompt = "Answer briefly."


LOOKUP_SCHEMA = {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}


class LookupTool(Tool):
    description = "Look up a help center entry by topic."
    input_schema = LOOKUP_SCHEMA

    def call(self, input):
        return f"entry for {input['topic']}"


class ToolAgent(SupportAgent):
    tools = [LookupTool]


def lookup_call(call_id, topic, split_at=10):
    arguments = json.dumps({"topic": topic})
    return (call_id, "lookup", [arguments[:split_at], arguments[split_at:]])


def types(run):
    return [event.type for event in run.events()]


# -- answers -----------------------------------------------------------------------------------------


def test_a_streamed_answer_completes_the_run_with_its_usage(connection):
    connection.reply(stream(text_chunks("Refunds take ", "30 days.", usage=(40, 7))))

    run = SupportAgent.ask("How long do refunds take?", settings={"temperature": 0.2, "max_tokens": 200})

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds take 30 days."
    assert (run.usage.input_tokens, run.usage.output_tokens) == (40, 7)
    [received] = connection.received
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.headers["openai-organization"] == "org-test"
    assert received.headers["x-title"] == "LittleGhost tests"
    assert received.body == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "How long do refunds take?"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "max_tokens": 200,
    }


def test_stream_ask_yields_the_text_deltas_in_order(connection):
    pieces = ["Re", "funds ", "take ", "thirty ", "days", "."]
    connection.reply(stream(text_chunks(*pieces)))

    run = SupportAgent.stream_ask("How long?")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert [e.data["text"] for e in events if e.type == "text_delta"] == pieces
    kinds = [e.type for e in events]
    assert kinds.index("message_start") < kinds.index("text_delta") < kinds.index("usage") < kinds.index("message_stop")


def test_reasoning_deltas_from_compatible_servers_become_reasoning_events(connection):
    connection.reply(stream([chunk({"role": "assistant", "reasoning_content": "The user greets. "}), *text_chunks("Hello!")]))

    run = SupportAgent.stream_ask("Hi")
    events = list(run)

    assert [e.data["text"] for e in events if e.type == "reasoning_delta"] == ["The user greets. "]
    assert run.response == "Hello!"


def test_content_sent_as_parts_becomes_reasoning_and_text(connection):
    """Mistral's magistral models stream ``delta.content`` as parts: ``thinking`` parts, then ``text`` parts."""
    def thinking(text):
        return chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": text}]}]})

    connection.reply(
        stream([chunk({"role": "assistant", "content": ""}), thinking("A greeting; "), thinking("greet back."),
                chunk({"content": [{"type": "text", "text": "Hello"}]}), chunk({"content": "!"}), chunk({}, "stop")])
    )

    run = SupportAgent.stream_ask("Hi")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Hello!"
    assert [e.data["text"] for e in events if e.type == "reasoning_delta"] == ["A greeting; ", "greet back."]


def test_cached_and_reasoning_tokens_are_reported_apart(connection):
    final = usage_chunk(100, 50, cached=60, reasoning=30)
    connection.reply(stream([*text_chunks("ok")[:-1], final]))

    usage = SupportAgent.ask("Hi").usage

    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (40, 60, 20, 30)
    assert usage.total_tokens == 150


def test_cache_writes_reported_by_openrouter_are_not_counted_as_uncached_input(connection):
    """OpenRouter adds ``prompt_tokens_details.cache_write_tokens`` (Anthropic models): part of ``prompt_tokens``."""
    final = usage_chunk(194, 2)
    final["usage"]["prompt_tokens_details"]["cache_write_tokens"] = 100
    connection.reply(stream([*text_chunks("ok")[:-1], final]))

    usage = SupportAgent.ask("Hi").usage

    assert (usage.input_tokens, usage.cache_write_tokens, usage.cache_read_tokens) == (94, 100, 0)
    assert usage.total_tokens == 196


# -- tools -------------------------------------------------------------------------------------------


def test_a_tool_call_streamed_in_fragments_runs_the_tool_then_the_answer(connection):
    connection.reply(
        stream(tool_call_chunks(lookup_call("call_Abc1", "refunds", split_at=5))),
        stream(text_chunks("Refunds: entry for refunds.")),
    )

    run = ToolAgent.stream_ask("Can I get a refund?")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds: entry for refunds."
    call_events = [(e.type, dict(e.data)) for e in events if e.data.get("id") == "call_Abc1"]
    assert [kind for kind, _ in call_events][:3] == ["tool_call_start", "tool_call_delta", "tool_call_delta"]
    assert "".join(d["arguments"] for kind, d in call_events if kind == "tool_call_delta") == '{"topic": "refunds"}'
    assert ("tool_call_stop", {"id": "call_Abc1", "name": "lookup", "input": {"topic": "refunds"}}) in call_events
    first, second = connection.received
    assert first.body["tools"] == [
        {
            "type": "function",
            "function": {"name": "lookup", "description": "Look up a help center entry by topic.", "parameters": LOOKUP_SCHEMA},
        }
    ]
    assert second.body["messages"][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_Abc1", "type": "function", "function": {"name": "lookup", "arguments": '{"topic": "refunds"}'}}],
        },
        {"role": "tool", "tool_call_id": "call_Abc1", "content": "entry for refunds"},
    ]
    assert run.usage.input_tokens == 30 + 12


def test_parallel_tool_calls_in_one_turn_each_get_their_result(connection):
    connection.reply(
        stream(tool_call_chunks(lookup_call("call_1", "refunds"), lookup_call("call_2", "shipping"))),
        stream(text_chunks("Both answered.")),
    )

    run = ToolAgent.ask("Refunds and shipping?")

    assert run.outcome == "completed", run.error
    tool_messages = [m for m in connection.received[1].body["messages"] if m["role"] == "tool"]
    assert sorted((m["tool_call_id"], m["content"]) for m in tool_messages) == [
        ("call_1", "entry for refunds"),
        ("call_2", "entry for shipping"),
    ]
    calls = connection.received[1].body["messages"][-3]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_1", "call_2"]


def test_calls_that_share_an_index_but_not_an_id_are_separate_calls(connection):
    """Ollama (and some gateways) number every tool call of a turn ``index: 0``; the ids tell them apart."""
    def whole_call(call_id, topic):
        call = {"index": 0, "id": call_id, "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"topic": topic})}}
        return chunk({"tool_calls": [call]})

    connection.reply(
        stream([chunk({"role": "assistant", "content": ""}), whole_call("call_a", "refunds"), whole_call("call_b", "shipping"), chunk({}, "tool_calls")]),
        stream(text_chunks("Both answered.")),
    )

    run = ToolAgent.ask("Refunds and shipping?")

    assert run.outcome == "completed", run.error
    tool_messages = [m for m in connection.received[1].body["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        ("call_a", "entry for refunds"),
        ("call_b", "entry for shipping"),
    ]


def test_tool_arguments_sent_as_a_json_object_are_the_tool_input(connection):
    """TGI and some llama.cpp builds send ``arguments`` as an object rather than a JSON string."""
    call = {"index": 0, "id": "call_o", "type": "function", "function": {"name": "lookup", "arguments": {"topic": "refunds"}}}
    connection.reply(
        stream([chunk({"role": "assistant", "content": None}), chunk({"tool_calls": [call]}), chunk({}, "tool_calls")]),
        stream(text_chunks("Done.")),
    )

    run = ToolAgent.ask("Refunds?")

    assert run.outcome == "completed", run.error
    tool_messages = [m for m in connection.received[1].body["messages"] if m["role"] == "tool"]
    assert tool_messages == [{"role": "tool", "tool_call_id": "call_o", "content": "entry for refunds"}]


class ScreenshotTool(Tool):
    description = "Take a screenshot of the customer's order page."
    input_schema = {"type": "object", "properties": {}}

    def call(self, input):
        return Tool.Result("Screenshot taken.", artifacts=(Artifact(media_type="image/png", data=PNG, name="order.png"),))


class ScreenshotAgent(SupportAgent):
    tools = [ScreenshotTool]


def test_an_image_a_tool_returns_reaches_the_model(connection):
    """Chat Completions tool messages hold text only, so a tool's image follows them in a user message."""
    connection.reply(
        stream(tool_call_chunks(("call_s", "screenshot", ["{}"]))),
        stream(text_chunks("The order shows as shipped.")),
    )

    run = ScreenshotAgent.ask("What does my order page say?")

    assert run.outcome == "completed", run.error
    tool_message, attachments = connection.received[1].body["messages"][-2:]
    assert tool_message == {"role": "tool", "tool_call_id": "call_s", "content": "Screenshot taken."}
    assert attachments["role"] == "user"
    assert {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}} in attachments["content"]


def test_tool_arguments_that_are_not_json_fail_the_run_as_a_malformed_tool_call(connection):
    connection.reply(stream(tool_call_chunks(("call_1", "lookup", ['{"topic": ', "refunds}"]))))

    run = ToolAgent.ask("Refunds?")

    assert run.outcome == "failed"
    assert isinstance(run.error, MalformedToolCallError)
    assert "lookup" in str(run.error)


def test_a_tool_call_cut_off_by_the_output_limit_is_an_output_limit_error(connection):
    """``finish_reason: length`` inside a tool call's arguments: the call cannot run, and the fix is the limit."""
    truncated = tool_call_chunks(("call_1", "lookup", ['{"topic": ', '"refu']))
    truncated[-2] = chunk({}, "length")
    connection.reply(stream(truncated))

    run = ToolAgent.ask("Refunds?", settings={"max_tokens": 8})

    assert run.outcome == "failed"
    assert type(run.error) is OutputLimitError
    assert "lookup" in str(run.error) and "max_tokens" in str(run.error)
    assert len(connection.received) == 1


# -- structured results ------------------------------------------------------------------------------

TRIAGE = {
    "type": "object",
    "properties": {"category": {"type": "string"}, "urgent": {"type": "boolean"}},
    "required": ["category", "urgent"],
    "additionalProperties": False,
}


class TriageAgent(SupportAgent):
    result_schema = TRIAGE


def test_a_result_schema_is_sent_as_response_format_and_the_json_answer_becomes_the_output(connection):
    answer = json.dumps({"category": "delivery", "urgent": True})
    connection.reply(stream(text_chunks(answer[:12], answer[12:])))

    run = TriageAgent.ask("My package is missing.")

    assert run.outcome == "completed", run.error
    assert run.result.output == {"category": "delivery", "urgent": True}
    response_format = connection.received[0].body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["schema"] == TRIAGE
    assert response_format["json_schema"]["name"]


def test_an_empty_answer_is_sent_back_with_string_content_when_the_result_is_repaired(connection):
    """OpenAI rejects an assistant message whose content is null without tool calls
    ("Invalid value for 'content': expected a string, got null"), so the repair request must not send one."""
    answer = json.dumps({"category": "billing", "urgent": False})
    connection.reply(
        stream([chunk({"role": "assistant", "content": ""}), chunk({}, "content_filter"), usage_chunk(9, 0)]),
        stream(text_chunks(answer)),
    )

    run = TriageAgent.ask("I was charged twice.")

    assert run.outcome == "completed", run.error
    assert run.result.output == {"category": "billing", "urgent": False}
    rejected = connection.received[1].body["messages"][-2]
    assert rejected == {"role": "assistant", "content": ""}


# -- errors and retries ------------------------------------------------------------------------------


def test_a_rate_limit_is_retried_and_announced_with_model_retry(connection):
    connection.reply(
        error(429, "Rate limit reached for gpt-4o-mini. Please try again in 20ms.", type="requests", code="rate_limit_exceeded"),
        stream(text_chunks("Done.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Done."
    assert len(connection.received) == 2
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert retry.data["error_class"] == "HTTPError"
    assert "429" in retry.data["message"]


def test_a_rate_limit_waits_as_long_as_retry_after_asks(connection):
    """Retried at once, a limit that resets in a second refuses again: the wait the server asks for is kept."""
    connection.reply(
        error(429, "Rate limit reached.", type="requests", code="rate_limit_exceeded", headers={"Retry-After": "1"}),
        stream(text_chunks("Done.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    first, second = connection.received
    assert second.at - first.at >= 1.0  # the backoff alone would have waited 0.25 s


def test_a_rejected_key_fails_the_run_without_retrying_or_showing_the_key(connection):
    connection.reply(
        error(401, f"Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com/account/api-keys.", code="invalid_api_key"),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError)
    assert (run.error.status, run.error.retryable) == (401, False)
    assert "401 Unauthorized" in str(run.error) and "api_key" in str(run.error)
    assert KEY not in str(run.error) and KEY not in run.error.body
    assert len(connection.received) == 1
    assert "model_retry" not in types(run)


def test_a_context_length_error_is_a_context_window_overflow(connection):
    connection.reply(
        error(400, "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.", code="context_length_exceeded")
    )

    run = SupportAgent.ask("Hi")

    assert isinstance(run.error, ContextWindowOverflowError)
    assert run.error.retryable is False


def test_llama_cpp_context_size_error_is_a_context_window_overflow(connection):
    """llama.cpp's server says it in its own words and error type."""
    message = "request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it"
    connection.reply(json_reply(400, {"error": {"code": 400, "message": message, "type": "exceed_context_size_error"}}))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ContextWindowOverflowError
    assert "8192 tokens" in str(run.error)


def test_a_chunk_that_is_not_json_fails_the_run_with_a_protocol_error(connection):
    connection.reply(stream([chunk({"role": "assistant", "content": ""}), '{"id": "chatcmpl-1", "choices": [']))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProtocolError
    assert "not JSON" in str(run.error)
    assert len(connection.received) == 1


def test_a_json_answer_instead_of_a_stream_is_a_protocol_error(connection):
    """A server (or proxy) that ignores ``stream: true``."""
    connection.reply(json_reply(200, {"id": "chatcmpl-1", "object": "chat.completion", "choices": []}))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ProtocolError
    assert "did not answer with an event stream" in str(run.error)


def test_a_json_error_answered_with_200_keeps_the_servers_message_without_the_key(connection):
    """Some servers and proxies answer a streaming request with a 200 JSON error: its message is the only clue."""
    message = f"The model 'gpt-4o-mni' does not exist or you do not have access to it (key {KEY})."
    connection.reply(json_reply(200, {"error": {"message": message, "type": "invalid_request_error", "code": "model_not_found"}}))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProtocolError
    assert "did not answer with an event stream" in str(run.error)
    assert "The model 'gpt-4o-mni' does not exist" in str(run.error)
    assert KEY not in str(run.error) and "[redacted]" in str(run.error)
    assert (run.error.code, run.error.retryable) == ("model_not_found", False)
    assert len(connection.received) == 1


def test_a_json_error_answered_with_200_is_retried_when_its_code_says_so(connection):
    connection.reply(
        json_reply(200, {"error": {"message": "The server is overloaded", "type": "server_error", "code": 503}}),
        stream(text_chunks("Done.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert "The server is overloaded" in retry.data["message"]


def test_an_error_object_inside_the_stream_is_a_provider_error(connection):
    connection.reply(stream([chunk({"content": "Hel"}), {"error": {"message": "Upstream model is overloaded", "code": 400}}]))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ProviderError
    assert "Upstream model is overloaded" in str(run.error)
    assert run.error.retryable is False


def test_a_finish_reason_error_is_a_provider_error_not_an_answer(connection):
    """OpenRouter ends a failed generation with ``finish_reason: "error"`` (its error on the choice)."""
    failed = chunk({"content": ""}, "error")
    failed["choices"][0]["error"] = {"code": 502, "message": "Upstream provider returned an invalid response"}
    connection.reply(
        stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "Partial "}), failed]),
        stream(text_chunks("Full answer.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert "Upstream provider returned an invalid response" in retry.data["message"]


def test_a_stream_that_ends_without_an_answer_is_retried_not_completed_empty(connection):
    """``[DONE]`` after no content, no tool call and no finish_reason: the generation failed somewhere
    upstream, so the run must not complete with an empty answer."""
    connection.reply(
        stream([chunk({"role": "assistant", "content": ""}), usage_chunk(12, 0)]),
        stream(text_chunks("Full answer.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert retry.data["error_class"] == "ProtocolError"
    assert "ended without an answer" in retry.data["message"]


def test_a_stream_that_keeps_ending_without_an_answer_fails_the_run(connection):
    connection.reply(*[stream([chunk({"role": "assistant", "content": ""})]) for _ in range(3)])

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProtocolError and run.error.retryable
    assert len(connection.received) == 3


def test_an_empty_answer_with_a_finish_reason_is_an_answer(connection):
    """``finish_reason: stop`` with no content is the model's (empty) answer, not a broken stream."""
    connection.reply(stream([chunk({"role": "assistant", "content": ""}), chunk({}, "stop"), usage_chunk(12, 0)]))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == ""
    assert len(connection.received) == 1


def test_a_named_error_event_is_a_provider_error_with_the_servers_message(connection):
    """DashScope sends ``event: error`` with ``code`` and ``message`` at the top level, then may still end with [DONE]."""
    frame = {"code": "DataInspectionFailed", "message": "Output data may contain inappropriate content.", "request_id": "r-1"}
    connection.reply(stream([chunk({"content": "Hel"}), f"event: error\ndata: {json.dumps(frame)}\n\n".encode()]))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProviderError
    assert "Output data may contain inappropriate content." in str(run.error)
    assert (run.error.code, run.error.retryable) == ("DataInspectionFailed", False)
    assert len(connection.received) == 1


def test_a_named_error_event_whose_data_is_not_json_keeps_its_text(connection):
    connection.reply(stream([chunk({"content": "Hel"}), b"event: error\ndata: upstream worker crashed\n\n"]))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ProviderError
    assert "upstream worker crashed" in str(run.error)


def test_an_error_frame_without_an_error_key_is_retried_by_its_status_code(connection):
    """``data: {"code": 503, "message": ...}``: the code is a status, so a retry may succeed."""
    connection.reply(
        stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "Par"}), {"code": 503, "message": "Model overloaded, try later"}]),
        stream(text_chunks("Full answer.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert "Model overloaded, try later" in retry.data["message"]


def test_chunks_with_a_null_error_field_are_ordinary_chunks(connection):
    """Some gateways put ``"error": null`` on every chunk; only an error object is an error."""
    connection.reply(stream([{**event, "error": None} for event in text_chunks("All ", "fine.")]))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "All fine."


def test_a_connection_dropped_mid_stream_is_retried(connection):
    connection.reply(
        drop_after(text_chunks("Partial ", "answ")[:3]),
        stream(text_chunks("Full answer.")),
    )

    run = SupportAgent.stream_ask("Hi")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    kinds = [e.type for e in events]
    retry = events[kinds.index("model_retry")]
    assert retry.data["partial_text"] is True
    assert kinds.index("text_delta") < kinds.index("model_retry")  # the superseded deltas came first


def test_a_connection_that_keeps_dropping_fails_the_run_after_the_retries(connection):
    connection.reply(*[drop_after(text_chunks("Part")[:2]) for _ in range(3)])

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError)
    assert run.error.retryable is True and run.error.status is None
    assert len(connection.received) == 3


def test_a_refused_connection_is_retried_then_fails_the_run(config):
    with socket.socket() as probe:  # a port with nobody listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    configure(providers={"local": {"adapter": "openai", "base_url": f"http://127.0.0.1:{port}/v1", "api_key": KEY, "allow_insecure_http": True}})

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError) and run.error.retryable
    assert "connection to provider connection 'local'" in str(run.error)
    assert types(run).count("model_retry") == 2


# -- cancellation, deadlines and credentials --------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_cancelling_mid_stream_stops_the_run_between_chunks(connection):
    released = threading.Event()
    connection.reply(stream(text_chunks("First ", "second ", "third."), hold=released, hold_after=2))

    run = SupportAgent.stream_ask("Hi")
    seen = []
    for event in run:
        seen.append(event.type)
        if event.type == "text_delta":
            run.cancel("user left")
            released.set()

    assert run.outcome == "cancelled"
    assert seen.count("text_delta") == 1
    assert "message_stop" not in seen


@pytest.mark.timeout(60)
def test_cancelling_while_the_server_stalls_ends_the_blocked_read(connection):
    """The server sends nothing more until the test ends: only shutting the socket can stop the read."""
    stalled = threading.Event()
    connection.reply(stream(text_chunks("First ", "never sent."), hold=stalled, hold_after=2))
    run = SupportAgent.stream_ask("Hi")
    try:
        for event in run:
            if event.type == "text_delta":
                run.cancel("user left")
    finally:
        stalled.set()

    assert run.outcome == "cancelled"
    assert "model_retry" not in types(run)


def _cancel_when(arrived, run):
    """Cancel ``run`` from another thread once the server has the request (its worker is then blocked)."""
    def cancel():
        if arrived.wait(30):
            run.cancel("user left")

    canceller = threading.Thread(target=cancel, daemon=True)
    canceller.start()
    return canceller


@pytest.mark.timeout(60)
@pytest.mark.parametrize("warm", [False, True], ids=["new connection", "kept-alive connection"])
def test_cancelling_while_waiting_for_the_response_headers_ends_the_wait(config, server, warm):
    """An overloaded endpoint may not even send headers: the cancel must not wait for the read timeout,
    and the abandoned connection must not serve the next request."""
    configure(providers={"local": {"adapter": "openai", "base_url": server.base_url, "api_key": KEY, "allow_insecure_http": True, "timeout": 40}})
    if warm:  # the stalled request then reuses this request's connection
        server.reply(stream(text_chunks("Warm.")))
        assert SupportAgent.ask("Hi").outcome == "completed"
    arrived, released, left = threading.Event(), threading.Event(), threading.Event()
    server.reply(stall_headers(text_chunks("Too late."), arrived=arrived, until=released, left=left), stream(text_chunks("Next.")))
    started = time.monotonic()
    try:
        run = SupportAgent.stream_ask("Hi")
        canceller = _cancel_when(arrived, run)
        list(run)
        elapsed = time.monotonic() - started
        if not warm:  # a connection opened for the request is shut at once, so nothing waits on it
            assert left.wait(10)
    finally:
        released.set()
    canceller.join(5)

    assert run.outcome == "cancelled"
    assert elapsed < 20  # half the read timeout: before, the wait lasted all 40 s
    assert "model_retry" not in types(run)
    after = SupportAgent.ask("Hi again")
    assert after.response == "Next.", after.error
    assert server.received[-1].port != server.received[-2].port


@pytest.mark.timeout(60)
def test_a_deadline_ends_the_wait_for_the_response_headers(connection):
    arrived, released = threading.Event(), threading.Event()
    connection.reply(stall_headers(text_chunks("Too late."), arrived=arrived, until=released))
    try:
        run = SupportAgent.ask("Hi", deadline=0.5)
    finally:
        released.set()

    assert arrived.is_set()
    assert run.outcome == "partial"
    assert isinstance(run.error, DeadlineExceededError)
    assert "model_retry" not in types(run)


def test_a_deadline_ends_a_stalled_stream_as_partial(connection):
    stalled = threading.Event()
    connection.reply(stream(text_chunks("First ", "never sent."), hold=stalled, hold_after=2))
    try:
        run = SupportAgent.ask("Hi", deadline=0.5)
    finally:
        stalled.set()

    assert run.outcome == "partial"
    assert isinstance(run.error, DeadlineExceededError)
    assert "model_retry" not in types(run)


@pytest.mark.timeout(60)
def test_a_deadline_ends_a_stream_kept_alive_by_comments(connection):
    """Each comment resets the read timeout and yields no event, so only the deadline itself can end the wait."""
    answered = threading.Event()
    connection.reply(keep_alive(text_chunks("Too late."), until=answered))
    try:
        run = SupportAgent.ask("Hi", deadline=0.5)
    finally:
        answered.set()

    assert run.outcome == "partial"
    assert isinstance(run.error, DeadlineExceededError)
    assert "model_retry" not in types(run)


def test_a_missing_api_key_fails_the_run_with_a_credential_error_before_any_request(config, server, monkeypatch):
    monkeypatch.delenv("LG_TEST_OPENAI_KEY", raising=False)
    configure(providers={"local": {"adapter": "openai", "base_url": server.base_url, "api_key_env": "LG_TEST_OPENAI_KEY", "allow_insecure_http": True}})

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, CredentialError)
    assert "$LG_TEST_OPENAI_KEY" in str(run.error)
    assert server.received == []


def test_the_key_is_read_from_the_named_environment_variable(config, server, monkeypatch):
    monkeypatch.setenv("LG_TEST_OPENAI_KEY", "sk-from-env")
    configure(providers={"local": {"adapter": "openai", "base_url": server.base_url, "api_key_env": "LG_TEST_OPENAI_KEY", "allow_insecure_http": True}})
    server.reply(stream(text_chunks("ok")))

    assert SupportAgent.ask("Hi").response == "ok"
    assert server.received[0].headers["authorization"] == "Bearer sk-from-env"


def test_a_key_read_with_a_trailing_newline_is_sent_without_it(config, server):
    """A key pasted or read from a file often ends in a newline; as a header value it would be illegal."""
    configure(providers={"local": {"adapter": "openai", "base_url": server.base_url, "api_key": KEY + "\n", "allow_insecure_http": True}})
    server.reply(stream(text_chunks("ok")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert server.received[0].headers["authorization"] == f"Bearer {KEY}"


def test_a_header_value_that_is_not_valid_http_fails_the_run_without_showing_it(config, server):
    """httpx quotes the illegal value in its error; an Azure-style key header must not end up in the run."""
    secret = "azure-key-7f3e9\r\nX-Injected: 1"
    headers = {"api-key": secret}
    configure(providers={"local": {"adapter": "openai", "base_url": server.base_url, "api_key": KEY, "allow_insecure_http": True, "headers": headers}})

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert "azure-key-7f3e9" not in str(run.error)
    assert all("azure-key-7f3e9" not in str(event.data) for event in run.events())
    assert "model_retry" not in types(run)
    assert server.received == []


# -- connection options -------------------------------------------------------------------------------


def test_an_injected_transport_replaces_the_network(config):
    """The transport is the extension point (CONVENTIONS): an httpx.MockTransport needs no server."""
    body = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in text_chunks("Mocked.")) + b"data: [DONE]\n\n"
    seen = []

    def handle(request):
        seen.append(str(request.url))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    configure(providers={"local": {"adapter": "openai", "api_key": KEY, "transport": httpx.MockTransport(handle)}})

    assert SupportAgent.ask("Hi").response == "Mocked."
    assert seen == ["https://api.openai.com/v1/chat/completions"]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"base_url": "http://models.example.test/v1"}, "plain HTTP"),
        ({"api_key_env": "X", "temprature": 0.2}, "unknown option 'temprature'"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"headers": {"X-Retries": 3}}, "headers must map header names to strings"),
        ({"transport": "mock"}, "transport must be an httpx transport"),
    ],
)
def test_bad_connection_options_are_configuration_errors_naming_the_option(config, options, problem):
    configure(providers={"local": {"adapter": "openai", "api_key": KEY, **options}})

    with pytest.raises(ConfigurationError, match=problem):
        SupportAgent.ask("Hi")
