"""The openai adapter's own format, against a local server speaking OpenAI's streaming format over real HTTP.

What every HTTP adapter must do (retries, errors, malformed streams, cancellation,
deadlines, credentials, the shared options) is checked for this one too by the
conformance suite, ``test_http_conformance``; this module checks what is Chat
Completions': the request body and headers, reasoning and content parts, usage
details, tool-call fragments and the ways compatible servers send them, tool
messages, ``response_format``, and the error frames compatible servers send.
Every test runs whole agent runs through the engine, so what is checked is what
a user sees and what the server received.
"""

from __future__ import annotations

import json
import threading

import pytest

from lg_core import ContextWindowOverflowError, HTTPError, ProtocolError, ProviderError
from tests.providers.agents import (
    LOOKUP_SCHEMA,
    TRIAGE,
    ScreenshotAgent,
    SupportAgent,
    ToolAgent,
    TriageAgent,
    lookup_call,
    retries,
    retry_reasons,
    use_connection,
)
from tests.providers.openai_server import (
    FRAMING,
    chunk,
    error,
    json_reply,
    serve,
    stream,
    text_chunks,
    tool_call_chunks,
    usage_chunk,
)
from tests.providers.sse_server import frames

KEY = "sk-test-Zq7t0psecret"


@pytest.fixture
def server():
    yield from serve()


@pytest.fixture
def connection(config, server):
    """A connection named ``local`` to the local server, every agent's model (``local:gpt-4o-mini``)."""
    options = {
        "adapter": "openai",
        "api_key": KEY,
        "organization": "org-test",
        "headers": {"X-Title": "LittleGhost tests"},
    }
    use_connection("local:gpt-4o-mini", options, server)
    return server


# -- requests and answers ------------------------------------------------------------------------------


def test_a_run_sends_a_chat_completions_request_with_the_key_the_organization_and_the_settings(connection):
    connection.reply(stream(text_chunks("Refunds take ", "30 days.")))

    run = SupportAgent.ask("How long do refunds take?", settings={"temperature": 0.2, "max_tokens": 200})

    assert run.outcome == "completed", run.error
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


def test_reasoning_deltas_from_compatible_servers_become_reasoning_events(connection):
    connection.reply(
        stream([chunk({"role": "assistant", "reasoning_content": "The user greets. "}), *text_chunks("Hello!")])
    )

    run = SupportAgent.stream_ask("Hi")
    events = list(run)

    assert [e.data["text"] for e in events if e.type == "reasoning_delta"] == ["The user greets. "]
    assert run.response == "Hello!"


def test_a_refusal_is_the_answer_and_stops_as_content_filter_like_the_other_adapters(connection):
    """OpenAI finishes a refusal with "stop"; it was reported as end_turn, where Anthropic's says content_filter."""
    connection.reply(
        stream(
            [
                chunk({"role": "assistant", "content": None, "refusal": ""}),
                chunk({"refusal": "I can't help with that."}),
                chunk({}, "stop"),
                usage_chunk(12, 5),
            ]
        )
    )

    run = SupportAgent.ask("Something I should not ask")

    assert run.outcome == "completed", run.error
    assert run.response == "I can't help with that."
    assert run.result.stop_reason == "content_filter"


def test_a_429_for_an_account_out_of_quota_fails_the_run_at_once(connection):
    """Not a rate limit: retrying cannot help until the account has credit again."""
    connection.reply(
        error(
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            type="insufficient_quota",
            code="insufficient_quota",
        )
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError) and run.error.status == 429
    assert "exceeded your current quota" in str(run.error)
    assert len(connection.received) == 1


def test_content_sent_as_parts_becomes_reasoning_and_text(connection):
    """Mistral's magistral models stream ``delta.content`` as parts: ``thinking`` parts, then ``text`` parts."""

    def thinking(text):
        return chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": text}]}]})

    connection.reply(
        stream(
            [
                chunk({"role": "assistant", "content": ""}),
                thinking("A greeting; "),
                thinking("greet back."),
                chunk({"content": [{"type": "text", "text": "Hello"}]}),
                chunk({"content": "!"}),
                chunk({}, "stop"),
            ]
        )
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

    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (
        40,
        60,
        20,
        30,
    )
    assert usage.total_tokens == 150


def test_cache_writes_reported_by_openrouter_are_not_counted_as_uncached_input(connection):
    """OpenRouter adds ``prompt_tokens_details.cache_write_tokens`` (Anthropic models): part of ``prompt_tokens``."""
    final = usage_chunk(194, 2)
    final["usage"]["prompt_tokens_details"]["cache_write_tokens"] = 100
    connection.reply(stream([*text_chunks("ok")[:-1], final]))

    usage = SupportAgent.ask("Hi").usage

    assert (usage.input_tokens, usage.cache_write_tokens, usage.cache_read_tokens) == (94, 100, 0)
    assert usage.total_tokens == 196


def usage_on_the_finish_chunk(*pieces):
    """A compatible server's answer (DeepSeek, Together, Mistral): the usage on the chunk with the finish reason."""
    *answer, finish, last = text_chunks(*pieces)
    return [*answer, {**finish, "usage": last["usage"]}]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "chunks", [text_chunks, usage_on_the_finish_chunk], ids=["usage-chunk-after-finish", "usage-on-finish"]
)
def test_the_usage_after_the_finish_reason_ends_the_answer_when_done_is_held_back(connection, chunks):
    """The request asks for usage, which comes last (OpenAI: a chunk of its own after the finish reason,
    before ``[DONE]``): a server that holds ``[DONE]`` back, or the body open, cannot stall the turn
    into a read timeout that throws the finished answer away. Usage that follows the finish reason is
    still read, so the run reports it."""
    use_connection("local:gpt-4o-mini", {"adapter": "openai", "api_key": KEY, "timeout": 3}, connection)
    released = threading.Event()
    encoded = FRAMING.encoded(chunks("All ", "done."))  # ends with [DONE]
    connection.reply(frames(encoded, hold=released, hold_after=len(encoded) - 1))

    try:
        run = SupportAgent.ask("Hi")
    finally:
        released.set()

    assert run.outcome == "completed", run.error
    assert run.response == "All done."
    assert (run.usage.input_tokens, run.usage.output_tokens) == (12, 5)
    assert retries(run) == [] and len(connection.received) == 1


@pytest.mark.parametrize(
    "bad_chunk",
    [
        {**chunk({}), "choices": [{"index": 0, "delta": "oops"}]},
        chunk({"tool_calls": {"index": 0, "function": {"name": "lookup"}}}),
    ],
    ids=["delta-is-a-string", "tool-calls-is-an-object"],
)
def test_a_chunk_of_an_unexpected_shape_is_a_protocol_error(connection, bad_chunk):
    """The spec: "response-shape failures become ProviderError subclasses", which after_model_error sees."""
    connection.reply(stream([bad_chunk, *text_chunks("Never read.")]))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProtocolError
    assert "sent a stream of an unexpected shape, which the openai adapter could not read" in str(run.error)


# -- tools -------------------------------------------------------------------------------------------


def test_a_tool_call_cut_off_by_done_without_a_finish_reason_is_asked_again(connection):
    """A gateway that closes the stream with [DONE] in the middle of a call: the arguments are cut,
    not malformed by the model, so the call is retried rather than failing the run."""
    cut = tool_call_chunks(("call_1", "lookup", ['{"topic": "ref']))[:-2]  # no finish reason, no usage
    connection.reply(stream(cut))
    connection.reply(stream(text_chunks("Refunds take 30 days.")))

    run = SupportAgent.ask("Refunds?")

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds take 30 days."
    [retry] = retries(run)
    assert retry.data["error_class"] == "ProtocolError"
    assert "without a finish_reason in the middle of tool call 'lookup'" in retry_reasons(run)[0]
    assert len(connection.received) == 2


def test_a_tool_call_streams_its_arguments_in_fragments_and_its_result_goes_back_as_a_tool_message(connection):
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
    first, second = connection.received
    assert first.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look up a help center entry by topic.",
                "parameters": LOOKUP_SCHEMA,
            },
        }
    ]
    assert second.body["messages"][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_Abc1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"topic": "refunds"}'},
                }
            ],
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
        call = {
            "index": 0,
            "id": call_id,
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"topic": topic})},
        }
        return chunk({"tool_calls": [call]})

    connection.reply(
        stream(
            [
                chunk({"role": "assistant", "content": ""}),
                whole_call("call_a", "refunds"),
                whole_call("call_b", "shipping"),
                chunk({}, "tool_calls"),
            ]
        ),
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
    call = {
        "index": 0,
        "id": "call_o",
        "type": "function",
        "function": {"name": "lookup", "arguments": {"topic": "refunds"}},
    }
    connection.reply(
        stream([chunk({"role": "assistant", "content": None}), chunk({"tool_calls": [call]}), chunk({}, "tool_calls")]),
        stream(text_chunks("Done.")),
    )

    run = ToolAgent.ask("Refunds?")

    assert run.outcome == "completed", run.error
    tool_messages = [m for m in connection.received[1].body["messages"] if m["role"] == "tool"]
    assert tool_messages == [{"role": "tool", "tool_call_id": "call_o", "content": "entry for refunds"}]


def test_nan_and_infinity_in_tool_arguments_are_invalid_input_the_model_is_told_about(connection):
    """Python's json decodes NaN and Infinity, which JSON has no value for: the call is answered with an
    input error and the model tries again, as for any invalid input, and the run goes on."""
    as_text = ("call_nan", "lookup", ['{"topic": "refunds", ', '"page": NaN}'])
    as_object = {
        "index": 1,
        "id": "call_inf",
        "type": "function",
        "function": {"name": "lookup", "arguments": {"topic": "shipping", "limits": [1, float("-inf")]}},
    }
    first = tool_call_chunks(as_text)
    first.insert(-2, chunk({"tool_calls": [as_object]}))
    connection.reply(
        stream(first),  # json.dumps writes the float as -Infinity, as a server written in Python would
        stream(tool_call_chunks(lookup_call("call_ok", "refunds"))),
        stream(text_chunks("Refunds: entry for refunds.")),
    )

    run = ToolAgent.ask("Refunds and shipping?")

    assert run.outcome == "completed", run.error
    answers = {m["tool_call_id"]: m["content"] for m in connection.received[1].body["messages"] if m["role"] == "tool"}
    assert answers == {
        "call_nan": "Error: Invalid input for tool 'lookup': input.page is NaN, which is not a JSON number "
        "(JSON numbers are finite: send a number, or leave the field out)",
        "call_inf": "Error: Invalid input for tool 'lookup': input.limits[1] is -Infinity, which is not a JSON number "
        "(JSON numbers are finite: send a number, or leave the field out)",
    }
    calls = connection.received[1].body["messages"][-3]["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        {"topic": "refunds", "page": "NaN"},
        {"topic": "shipping", "limits": [1, "-Infinity"]},
    ]
    assert [m["content"] for m in connection.received[2].body["messages"] if m["role"] == "tool"][
        -1
    ] == "entry for refunds"
    assert run.response == "Refunds: entry for refunds."


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


# -- structured results ------------------------------------------------------------------------------


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


def test_a_result_schema_is_sent_as_a_strict_json_schema(connection):
    """Without ``strict``, OpenAI takes the schema as a hint; result schemas are strict-mode schemas
    (checked when the Agent class is defined), so the answer is decoded under the schema."""
    connection.reply(stream(text_chunks(json.dumps({"category": "billing", "urgent": False}))))

    run = TriageAgent.ask("I was charged twice.")

    assert run.outcome == "completed", run.error
    assert connection.received[0].body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "result", "strict": True, "schema": TRIAGE},
    }


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


def test_llama_cpp_context_size_error_is_a_context_window_overflow(connection):
    """llama.cpp's server says it in its own words and error type."""
    message = "request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it"
    connection.reply(json_reply(400, {"error": {"code": 400, "message": message, "type": "exceed_context_size_error"}}))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ContextWindowOverflowError
    assert "8192 tokens" in str(run.error)


ANTHROPIC_OVERFLOW = (
    '{"type":"error","error":{"type":"invalid_request_error",'
    '"message":"prompt is too long: 201234 tokens > 200000 maximum"}}'
)


@pytest.mark.parametrize(
    ("body", "quoted"),
    [
        pytest.param(
            {
                "error": {
                    "code": 400,
                    "message": (
                        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
                    ),
                    "status": "INVALID_ARGUMENT",
                }
            },
            "exceeds the maximum number of tokens allowed (1048576)",
            id="gemini-openai-compatible-endpoint",
        ),
        pytest.param(
            {
                "error": {
                    "message": f"litellm.BadRequestError: AnthropicException - {ANTHROPIC_OVERFLOW}",
                    "type": None,
                    "param": None,
                    "code": "400",
                }
            },
            "prompt is too long: 201234 tokens > 200000 maximum",
            id="litellm-proxy-for-anthropic",
        ),
        pytest.param(
            {
                "error": {
                    "code": 400,
                    "message": "Provider returned error",
                    "metadata": {"provider_name": "Anthropic", "raw": ANTHROPIC_OVERFLOW},
                }
            },
            "prompt is too long: 201234 tokens > 200000 maximum",
            id="openrouter-upstream-error",
        ),
    ],
)
def test_a_gateways_context_window_error_in_another_providers_words_is_a_context_window_overflow(
    connection, body, quoted
):
    """Gateways pass an upstream provider's words through this API: Google's OpenAI-compatible endpoint
    speaks Gemini's, a LiteLLM proxy wraps Anthropic's, OpenRouter tells them only in ``metadata.raw``."""
    connection.reply(json_reply(400, body))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ContextWindowOverflowError
    assert quoted in str(run.error)
    assert run.error.retryable is False and len(connection.received) == 1


@pytest.mark.parametrize(
    "reply",
    [
        error(
            400, "Invalid 'max_tokens': integer above maximum value. Expected a value <= 16384, but got 200000 instead."
        ),
        json_reply(
            400,
            {
                "error": {
                    "code": 400,
                    "message": "Provider returned error",
                    "metadata": {
                        "provider_name": "Anthropic",
                        "raw": '{"type":"error","error":{"type":"invalid_request_error",'
                        '"message":"messages: text content blocks must be non-empty"}}',
                    },
                }
            },
        ),
    ],
    ids=["max-tokens", "upstream-empty-message"],
)
def test_a_bad_request_about_something_else_stays_an_http_error(connection, reply):
    connection.reply(reply)

    run = SupportAgent.ask("Hi")

    assert type(run.error) is HTTPError
    assert run.error.status == 400


def test_a_json_answer_instead_of_a_stream_is_a_protocol_error(connection):
    """A server (or proxy) that ignores ``stream: true``."""
    connection.reply(json_reply(200, {"id": "chatcmpl-1", "object": "chat.completion", "choices": []}))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ProtocolError
    assert "did not answer with an event stream" in str(run.error)


def test_a_json_error_answered_with_200_keeps_its_code(connection):
    """Some servers and proxies answer a streaming request with a 200 JSON error: its message and code
    are the only clues."""
    message = "The model 'gpt-4o-mni' does not exist or you do not have access to it."
    connection.reply(
        json_reply(200, {"error": {"message": message, "type": "invalid_request_error", "code": "model_not_found"}})
    )

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ProtocolError
    assert "The model 'gpt-4o-mni' does not exist" in str(run.error)
    assert (run.error.code, run.error.retryable) == ("model_not_found", False)


def test_a_json_error_answered_with_200_is_retried_when_its_code_says_so(connection):
    connection.reply(
        json_reply(200, {"error": {"message": "The server is overloaded", "type": "server_error", "code": 503}}),
        stream(text_chunks("Done.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    [retry] = retries(run)
    assert "The server is overloaded" in retry_reasons(run)[0]


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
    [retry] = retries(run)
    assert "Upstream provider returned an invalid response" in retry_reasons(run)[0]


def test_an_empty_answer_with_a_finish_reason_is_an_answer(connection):
    """``finish_reason: stop`` with no content is the model's (empty) answer, not a broken stream."""
    connection.reply(stream([chunk({"role": "assistant", "content": ""}), chunk({}, "stop"), usage_chunk(12, 0)]))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == ""
    assert len(connection.received) == 1


def test_a_named_error_event_is_a_provider_error_with_the_servers_message(connection):
    """DashScope sends ``event: error`` with ``code`` and ``message`` at the top level,
    then may still end with [DONE]."""
    frame = {
        "code": "DataInspectionFailed",
        "message": "Output data may contain inappropriate content.",
        "request_id": "r-1",
    }
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
        stream(
            [
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "Par"}),
                {"code": 503, "message": "Model overloaded, try later"},
            ]
        ),
        stream(text_chunks("Full answer.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    [retry] = retries(run)
    assert "Model overloaded, try later" in retry_reasons(run)[0]


def test_chunks_with_a_null_error_field_are_ordinary_chunks(connection):
    """Some gateways put ``"error": null`` on every chunk; only an error object is an error."""
    connection.reply(stream([{**event, "error": None} for event in text_chunks("All ", "fine.")]))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "All fine."
