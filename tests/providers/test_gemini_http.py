"""The gemini adapter against a local server speaking Google's streamGenerateContent format over real HTTP.

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
    ProtocolError,
    ProviderError,
    Tool,
    ToolError,
    configure,
)
from lg_core.content import Image, Reasoning, Text
from lg_core.messages import Message
from lg_core.providers import GeminiProvider
from tests.providers.gemini_server import (
    MODEL_VERSION,
    RESPONSE_ID,
    SIGNATURE,
    call,
    calls_answer,
    chunk,
    drop_after,
    encode,
    error,
    error_body,
    error_info,
    html_reply,
    json_reply,
    keep_alive,
    retry_info,
    serve,
    stall_headers,
    stream,
    text,
    text_answer,
    thought,
    usage,
)

KEY = "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
PNG = b"\x89PNG\r\n\x1a\n"
STREAM_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


@pytest.fixture
def server():
    yield from serve()


@pytest.fixture
def connection(config, server):
    """A connection named ``gemini`` to the local server, so agents name ``gemini:<model>``."""
    configure(
        providers={
            "gemini": {
                "adapter": "gemini",
                "base_url": server.base_url,
                "api_key": KEY,
                "allow_insecure_http": True,
                "headers": {"x-goog-user-project": "support-bots"},
            }
        }
    )
    return server


class SupportAgent(Agent):
    model = "gemini:gemini-2.5-flash"
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


def types(run):
    return [event.type for event in run.events()]


# -- answers -----------------------------------------------------------------------------------------


def test_a_streamed_answer_completes_the_run_with_its_usage(connection):
    connection.reply(stream(text_answer("Refunds take ", "30 days.", prompt=40, output=7)))

    run = SupportAgent.ask("How long do refunds take?", settings={"temperature": 0.2, "max_tokens": 200})

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds take 30 days."
    assert (run.usage.input_tokens, run.usage.output_tokens) == (40, 7)
    [received] = connection.received
    assert received.path == STREAM_PATH
    assert received.headers["x-goog-api-key"] == KEY
    assert received.headers["x-goog-user-project"] == "support-bots"
    assert received.headers["accept"] == "text/event-stream"
    assert "authorization" not in received.headers and KEY not in received.path
    assert received.body == {
        "contents": [{"role": "user", "parts": [{"text": "How long do refunds take?"}]}],
        "systemInstruction": {"parts": [{"text": "Answer briefly."}]},
        "generationConfig": {"temperature": 0.2, "maxOutputTokens": 200},
    }


def test_stream_ask_yields_the_text_deltas_in_order(connection):
    pieces = ["Re", "funds ", "take ", "thirty ", "days", "."]
    connection.reply(stream(text_answer(*pieces)))

    run = SupportAgent.stream_ask("How long?")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert [e.data["text"] for e in events if e.type == "text_delta"] == pieces
    kinds = [e.type for e in events]
    assert kinds.index("message_start") < kinds.index("text_delta") < kinds.index("usage") < kinds.index("message_stop")
    response = next(e for e in events if e.type == "message_stop").data["response"]
    assert response.metadata["id"] == RESPONSE_ID
    assert response.metadata["provider_model"] == MODEL_VERSION
    assert response.metadata["provider_stop_reason"] == "STOP"


def test_a_stream_framed_with_bare_newlines_reads_the_same(connection):
    """A proxy may re-frame Google's CRLF CRLF with LF LF; both are SSE."""
    frames = [encode(item).replace(b"\r\n", b"\n") for item in text_answer("Same ", "answer.")]
    connection.reply(stream(frames))

    assert SupportAgent.ask("Hi").response == "Same answer."


def test_cached_and_thinking_tokens_are_counted_apart_from_the_rest(connection):
    counts = usage(1200, 30, thoughts=250, cached=1000)
    connection.reply(stream([chunk(text("ok"), finish="STOP", counts=counts)]))

    run = SupportAgent.ask("Hi")

    assert (run.usage.input_tokens, run.usage.cache_read_tokens, run.usage.output_tokens, run.usage.reasoning_tokens) == (200, 1000, 30, 250)
    assert run.usage.total_tokens == 1200 + 30 + 250


def test_thought_summaries_stream_as_reasoning_and_stay_out_of_the_next_request(connection):
    connection.reply(
        stream([chunk(thought("**Checking the policy**\n\n")), chunk(thought("Refunds need a lookup.")), *calls_answer(call("lookup", {"topic": "refunds"}))]),
        stream(text_answer("Refunds take 30 days.")),
    )
    settings = {"thinking_config": {"includeThoughts": True, "thinkingBudget": 1024}}

    run = ToolAgent.stream_ask("Can I get a refund?", settings=settings)
    events = list(run)

    assert run.outcome == "completed", run.error
    assert [e.data["text"] for e in events if e.type == "reasoning_delta"] == ["**Checking the policy**\n\n", "Refunds need a lookup."]
    first, second = connection.received
    assert first.body["generationConfig"] == {"thinkingConfig": {"includeThoughts": True, "thinkingBudget": 1024}}
    assert second.body["contents"][1] == {"role": "model", "parts": [{"functionCall": {"name": "lookup", "args": {"topic": "refunds"}}}]}
    assert run.result.messages[1].content[0] == Reasoning(text="**Checking the policy**\n\nRefunds need a lookup.")


def test_a_safety_stop_ends_the_turn_as_content_filter_with_what_was_said(connection):
    connection.reply(stream(text_answer("I can't help ", "with that.", finish="SAFETY")))

    run = SupportAgent.stream_ask("Hi")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "I can't help with that."
    assert next(e for e in events if e.type == "message_stop").data["stop_reason"] == "content_filter"


def test_a_blocked_prompt_fails_the_run_without_a_retry(connection):
    blocked = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": usage(8), "modelVersion": MODEL_VERSION, "responseId": RESPONSE_ID}
    connection.reply(stream([blocked]))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProviderError
    assert "blocked the prompt (PROHIBITED_CONTENT)" in str(run.error)
    assert (run.error.retryable, run.error.error_type) == (False, "PROHIBITED_CONTENT")
    assert len(connection.received) == 1


# -- tools -------------------------------------------------------------------------------------------


def test_a_tool_call_runs_the_tool_and_its_result_goes_back_as_a_function_response(connection):
    connection.reply(
        stream([chunk(text("Let me check.")), *calls_answer(call("lookup", {"topic": "refunds"}))]),
        stream(text_answer("Refunds: entry for refunds.", prompt=60)),
    )

    run = ToolAgent.stream_ask("Can I get a refund?")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds: entry for refunds."
    [call_id] = {e.data["id"] for e in events if e.type == "tool_call_start"}
    call_events = [(e.type, dict(e.data)) for e in events if e.data.get("id") == call_id]
    assert call_events[:2] == [("tool_call_start", {"id": call_id, "name": "lookup"}), ("tool_call_delta", {"id": call_id, "arguments": '{"topic":"refunds"}'})]
    assert ("tool_call_stop", {"id": call_id, "name": "lookup", "input": {"topic": "refunds"}}) in call_events
    first, second = connection.received
    assert first.body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "lookup",
                    "description": "Look up a help center entry by topic.",
                    "parameters": {"type": "OBJECT", "properties": {"topic": {"type": "STRING"}}, "required": ["topic"]},
                }
            ]
        }
    ]
    assert second.body["contents"][1:] == [
        {"role": "model", "parts": [{"text": "Let me check."}, {"functionCall": {"name": "lookup", "args": {"topic": "refunds"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "lookup", "response": {"output": "entry for refunds"}}}]},
    ]
    assert run.usage.input_tokens == 40 + 60


def test_generated_call_ids_are_stable_and_never_sent(connection):
    """Gemini before 3.5 names no call: the id comes from the model call's sequence and the call's place."""
    connection.reply(
        stream(calls_answer(call("lookup", {"topic": "refunds"}), call("lookup", {"topic": "secrets"}))),
        stream(text_answer("One answered.")),
    )

    run = ToolAgent.ask("Refunds and secrets?")

    assert run.outcome == "completed", run.error
    assert [use.id for use in run.result.messages[1].tool_uses] == ["gemini_call_0_0", "gemini_call_0_1"]
    results = connection.received[1].body["contents"][-1]
    assert results == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "lookup", "response": {"output": "entry for refunds"}}},
            {"functionResponse": {"name": "lookup", "response": {"error": results["parts"][1]["functionResponse"]["response"]["error"]}}},
        ],
    }
    assert "not in the help center" in results["parts"][1]["functionResponse"]["response"]["error"]


def test_ids_and_signatures_gemini_issues_go_back_as_they_came(connection):
    """Gemini 3 signs the first of parallel calls and refuses the next request without the signature."""
    connection.reply(
        stream(calls_answer(call("lookup", {"topic": "refunds"}, call_id="bu4kjcsx", signature=SIGNATURE), call("lookup", {"topic": "returns"}, call_id="lde815f6"))),
        stream([chunk(text("Both looked up.")), chunk(text("", signature="Eu4BCusBAQw51sfrm"), finish="STOP")]),
    )

    run = ToolAgent.ask("Refunds and returns?")

    assert run.outcome == "completed", run.error
    assert run.response == "Both looked up."
    second = connection.received[1].body["contents"]
    assert second[1] == {
        "role": "model",
        "parts": [
            {"functionCall": {"name": "lookup", "args": {"topic": "refunds"}, "id": "bu4kjcsx"}, "thoughtSignature": SIGNATURE},
            {"functionCall": {"name": "lookup", "args": {"topic": "returns"}, "id": "lde815f6"}},
        ],
    }
    assert [part["functionResponse"]["id"] for part in second[2]["parts"]] == ["bu4kjcsx", "lde815f6"]
    final = run.result.messages[-1]
    assert final.text == "Both looked up."
    assert isinstance(final.content[-1], Reasoning) and final.content[-1].text == ""


class ScreenshotTool(Tool):
    description = "Take a screenshot of the customer's order page."
    input_schema = {"type": "object", "properties": {}}

    def call(self, input):
        return Tool.Result("Screenshot taken.", artifacts=(Artifact(media_type="image/png", data=PNG, name="order.png"),))


class ScreenshotAgent(SupportAgent):
    tools = [ScreenshotTool]


def test_a_tool_without_parameters_is_declared_without_them_and_its_image_follows_the_response(connection):
    connection.reply(stream(calls_answer(call("screenshot"))), stream(text_answer("The order shows as shipped.")))

    run = ScreenshotAgent.ask("What does my order page say?")

    assert run.outcome == "completed", run.error
    first, second = connection.received
    assert first.body["tools"] == [{"functionDeclarations": [{"name": "screenshot", "description": "Take a screenshot of the customer's order page."}]}]
    assert second.body["contents"][-1]["parts"] == [
        {"functionResponse": {"name": "screenshot", "response": {"output": "Screenshot taken."}}},
        {"text": "Attachments returned by tool call screenshot (gemini_call_0_0):"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
    ]


def test_an_image_the_user_sends_reaches_the_model_as_inline_data(connection):
    connection.reply(stream(text_answer("A PNG header.")))
    question = Message(role="user", content=[Text(text="What is this?"), Image(data=PNG, media_type="image/png")])

    run = SupportAgent.ask(question)

    assert run.outcome == "completed", run.error
    assert connection.received[0].body["contents"][0]["parts"] == [
        {"text": "What is this?"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
    ]


def test_an_image_type_gemini_cannot_read_fails_the_run_before_any_request(connection):
    question = Message(role="user", content=[Text(text="What is this?"), Image(data=b"GIF89a", media_type="image/gif", name="scan.gif")])

    run = SupportAgent.ask(question)

    assert run.outcome == "failed"
    assert "image 'scan.gif' of type 'image/gif'" in str(run.error)
    assert "image/png" in str(run.error)
    assert connection.received == []


def test_a_tool_schema_gemini_cannot_express_fails_the_run_naming_the_tool_and_path(connection):
    class TagTool(Tool):
        description = "Tag the ticket."
        input_schema = {"type": "object", "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}}}

        def call(self, input):
            return "tagged"

    class TagAgent(SupportAgent):
        tools = [TagTool]

    run = TagAgent.ask("Tag it.")

    assert run.outcome == "failed"
    assert type(run.error) is ConfigurationError
    assert "tool 'tag' cannot be sent to Gemini: at /properties/tags/additionalProperties" in str(run.error)
    assert connection.received == []


# -- structured results ------------------------------------------------------------------------------

TRIAGE = {
    "type": "object",
    "properties": {"category": {"type": "string", "enum": ["billing", "delivery"]}, "urgent": {"type": "boolean"}, "note": {"type": ["string", "null"]}},
    "required": ["category", "urgent", "note"],
    "additionalProperties": False,
}
GEMINI_TRIAGE = {
    "type": "OBJECT",
    "properties": {
        "category": {"type": "STRING", "enum": ["billing", "delivery"]},
        "urgent": {"type": "BOOLEAN"},
        "note": {"type": "STRING", "nullable": True},
    },
    "required": ["category", "urgent", "note"],
}


class TriageAgent(SupportAgent):
    result_schema = TRIAGE


def test_a_result_schema_is_submitted_through_a_tool_by_default(connection):
    """Before Gemini 3 a model refuses responseSchema beside tools, so native structured output is opt-in."""
    connection.reply(stream(calls_answer(call("submit_result", {"category": "delivery", "urgent": True, "note": None}))))

    run = TriageAgent.ask("My package is missing.")

    assert run.outcome == "completed", run.error
    assert run.result.output == {"category": "delivery", "urgent": True, "note": None}
    body = connection.received[0].body
    [declaration] = body["tools"][0]["functionDeclarations"]
    assert (declaration["name"], declaration["parameters"]) == ("submit_result", GEMINI_TRIAGE)
    assert "generationConfig" not in body


def test_native_structured_output_is_sent_as_a_response_schema_when_the_connection_enables_it(config, server):
    configure(
        providers={
            "gemini": {
                "adapter": "gemini", "base_url": server.base_url, "api_key": KEY, "allow_insecure_http": True,
                "capabilities": {"native_structured_output": True},
            }
        }
    )
    answer = json.dumps({"category": "billing", "urgent": False, "note": "charged twice"})
    server.reply(stream(text_answer(answer[:10], answer[10:])))

    run = TriageAgent.ask("I was charged twice.", settings={"temperature": 0})

    assert run.outcome == "completed", run.error
    assert run.result.output == {"category": "billing", "urgent": False, "note": "charged twice"}
    body = server.received[0].body
    assert body["generationConfig"] == {"temperature": 0, "responseMimeType": "application/json", "responseSchema": GEMINI_TRIAGE}
    assert "tools" not in body


def test_a_model_that_refuses_a_response_schema_beside_tools_says_what_to_change(config, server):
    configure(providers={"gemini": {"adapter": "gemini", "base_url": server.base_url, "api_key": KEY, "allow_insecure_http": True, "capabilities": {"native_structured_output": True}}})
    server.reply(error(400, "INVALID_ARGUMENT", "Function calling with a response mime type: 'application/json' is unsupported"))

    class ToolTriageAgent(TriageAgent):
        tools = [LookupTool]

    run = ToolTriageAgent.ask("Triage this.")

    assert run.outcome == "failed"
    assert "capabilities.native_structured_output off" in str(run.error)


# -- errors and retries ------------------------------------------------------------------------------


def test_a_rate_limit_is_retried_after_the_delay_google_states(connection):
    connection.reply(
        error(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details.", details=[retry_info("0.2s")]),
        stream(text_answer("Done.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert len(connection.received) == 2
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert retry.data["error_class"] == "HTTPError"
    assert "429 Too Many Requests: You exceeded your current quota" in retry.data["message"]
    assert "(RESOURCE_EXHAUSTED)" in retry.data["message"]


def test_a_rate_limit_that_keeps_refusing_fails_the_run_with_the_wait_it_asked_for(connection):
    connection.reply(*[error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).", details=[retry_info("0.1s")]) for _ in range(3)])

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError)
    assert (run.error.status, run.error.retryable, run.error.retry_after, run.error.error_type) == (429, True, 0.1, "RESOURCE_EXHAUSTED")
    assert types(run).count("model_retry") == 2
    assert len(connection.received) == 3


def test_an_unavailable_model_is_retried_after_its_retry_after_header(connection):
    connection.reply(
        error(503, "UNAVAILABLE", "The model is overloaded. Please try again later.", headers={"Retry-After": "0.1"}),
        error(500, "INTERNAL", "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"),
        stream(text_answer("Done.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert types(run).count("model_retry") == 2
    assert len(connection.received) == 3


@pytest.mark.parametrize(
    ("status", "code", "message", "phrase"),
    [
        (400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified", "400 Bad Request"),
        (400, "FAILED_PRECONDITION", "User location is not supported for the API use.", "400 Bad Request"),
        (403, "PERMISSION_DENIED", f"Method doesn't allow unregistered callers (key {KEY}).", "403 Forbidden"),
        (404, "NOT_FOUND", "models/gemini-2.5-flsh is not found for API version v1beta, or is not supported for generateContent.", "404 Not Found"),
    ],
)
def test_a_refused_request_fails_the_run_at_once_with_the_servers_message_and_never_the_key(connection, status, code, message, phrase):
    connection.reply(error(status, code, message))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError)
    assert (run.error.status, run.error.retryable, run.error.error_type) == (status, False, code)
    assert phrase in str(run.error)
    assert message.replace(KEY, "[redacted]").rstrip(".") in str(run.error)
    assert KEY not in str(run.error) and KEY not in run.error.body
    assert len(connection.received) == 1
    assert "model_retry" not in types(run)


def test_a_wrong_api_key_says_to_check_the_key(connection):
    connection.reply(error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", details=[error_info("API_KEY_INVALID")]))

    run = SupportAgent.ask("Hi")

    assert isinstance(run.error, HTTPError) and run.error.retryable is False
    assert str(run.error).endswith("API key not valid. Please pass a valid API key (INVALID_ARGUMENT). Check the connection's api_key or api_key_env.")


def test_a_prompt_longer_than_the_context_window_is_a_context_window_overflow(connection):
    connection.reply(error(400, "INVALID_ARGUMENT", "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ContextWindowOverflowError
    assert "input token count (1200000)" in str(run.error)
    assert run.error.retryable is False


def test_an_error_chunk_mid_stream_is_retried_when_unavailable(connection):
    partial = [*text_answer("Partial ", "answ")[:1], error_body(503, "UNAVAILABLE", "The model is overloaded.")]
    connection.reply(stream(partial), stream(text_answer("Full answer.")))

    run = SupportAgent.stream_ask("Hi")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    retry = next(e for e in events if e.type == "model_retry")
    assert retry.data["partial_text"] is True
    assert retry.data["error_class"] == "ProviderError"
    assert "reported an error mid-stream: The model is overloaded (UNAVAILABLE)" in retry.data["message"]


def test_a_malformed_function_call_is_retried(connection):
    bad = chunk(finish="MALFORMED_FUNCTION_CALL", finish_message="Malformed function call: print(default_api.lookup(topic='refunds'")
    connection.reply(stream([bad]), stream(calls_answer(call("lookup", {"topic": "refunds"}))), stream(text_answer("Done.")))

    run = ToolAgent.ask("Refunds?")

    assert run.outcome == "completed", run.error
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert retry.data["error_class"] == "MalformedToolCallError"
    assert "MALFORMED_FUNCTION_CALL" in retry.data["message"] and "default_api.lookup" in retry.data["message"]


def test_a_connection_dropped_mid_stream_is_retried(connection):
    connection.reply(drop_after(text_answer("Partial ", "answ", "er")[:2]), stream(text_answer("Full answer.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    assert "the connection to provider connection 'gemini'" in next(e for e in run.events() if e.type == "model_retry").data["message"]


# -- malformed streams ----------------------------------------------------------------------------------


def test_a_chunk_that_is_not_json_fails_the_run_with_a_protocol_error(connection):
    connection.reply(stream([*text_answer("Hel", "lo")[:1], b'data: {"candidates": [{"content": {"parts": [{"text": "lo"}\r\n\r\n']))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProtocolError
    assert "not JSON" in str(run.error)
    assert len(connection.received) == 1


def test_a_stream_that_ends_before_a_finish_reason_is_retried(connection):
    """The server closed the body cleanly but early: the answer is incomplete, and another try may finish it."""
    connection.reply(stream(text_answer("Partial ", "answ", "er")[:2]), stream(text_answer("Full answer.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert "ended before the response was complete (no finishReason)" in retry.data["message"]


def test_a_stream_that_keeps_ending_early_fails_the_run_after_the_retries(connection):
    connection.reply(*[stream(text_answer("Part", "ial")[:1]) for _ in range(3)])

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError) and run.error.retryable and run.error.status is None
    assert len(connection.received) == 3


def test_an_empty_stop_is_retried_not_completed_empty(connection):
    connection.reply(stream([chunk(finish="STOP")]), stream(text_answer("Full answer.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    [retry] = [e for e in run.events() if e.type == "model_retry"]
    assert retry.data["error_class"] == "ProtocolError"
    assert "ended without an answer" in retry.data["message"]


def test_function_call_arguments_that_are_not_an_object_fail_the_run_as_a_malformed_tool_call(connection):
    connection.reply(stream(calls_answer(call("lookup", ["refunds"]))))  # type: ignore[arg-type]

    run = ToolAgent.ask("Refunds?")

    assert run.outcome == "failed"
    assert type(run.error) is MalformedToolCallError
    assert "lookup" in str(run.error)


def test_parts_that_are_not_a_list_are_a_protocol_error(connection):
    broken = {"candidates": [{"content": {"parts": {"text": "Hi"}, "role": "model"}, "finishReason": "STOP", "index": 0}]}
    connection.reply(stream([broken]))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ProtocolError
    assert "content.parts is not a list" in str(run.error)


def test_a_json_answer_instead_of_a_stream_is_a_protocol_error_keeping_its_message(connection):
    """A proxy that dropped ``alt=sse`` answers with one JSON document (or an error) and status 200."""
    connection.reply(json_reply(200, [error_body(400, "INVALID_ARGUMENT", f"bad key {KEY}")]))

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
def test_cancelling_mid_stream_stops_the_run_between_chunks(connection):
    released = threading.Event()
    connection.reply(stream(text_answer("First ", "second ", "third."), hold=released, hold_after=1))

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
def test_a_deadline_ends_a_stream_kept_alive_by_a_proxy(connection):
    answered = threading.Event()
    connection.reply(keep_alive(text_answer("Too ", "late."), until=answered, after=1))
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
    connection.reply(stall_headers(text_answer("Too late."), arrived=arrived, until=released))
    try:
        run = SupportAgent.ask("Hi", deadline=0.5)
    finally:
        released.set()

    assert arrived.is_set()
    assert run.outcome == "partial"
    assert isinstance(run.error, DeadlineExceededError)


def test_a_missing_api_key_fails_the_run_with_a_credential_error_before_any_request(config, server, monkeypatch):
    monkeypatch.delenv("LG_TEST_GEMINI_KEY", raising=False)
    configure(providers={"gemini": {"adapter": "gemini", "base_url": server.base_url, "api_key_env": "LG_TEST_GEMINI_KEY", "allow_insecure_http": True}})

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, CredentialError)
    assert "$LG_TEST_GEMINI_KEY" in str(run.error)
    assert server.received == []


def test_a_connection_without_any_key_suggests_geminis_variable(config, server):
    configure(providers={"gemini": {"adapter": "gemini", "base_url": server.base_url, "allow_insecure_http": True}})

    run = SupportAgent.ask("Hi")

    assert isinstance(run.error, CredentialError)
    assert "api_key_env: GEMINI_API_KEY" in str(run.error)


def test_the_key_is_read_from_the_named_environment_variable_and_kept_out_of_reprs(config, server, monkeypatch):
    monkeypatch.setenv("LG_TEST_GEMINI_KEY", "AIza-from-env")
    configure(providers={"gemini": {"adapter": "gemini", "base_url": server.base_url, "api_key_env": "LG_TEST_GEMINI_KEY", "allow_insecure_http": True, "api_version": "v1"}})
    server.reply(stream(text_answer("ok")))

    assert SupportAgent.ask("Hi").response == "ok"
    assert server.received[0].headers["x-goog-api-key"] == "AIza-from-env"
    assert server.received[0].path == "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    provider = GeminiProvider("direct", {"api_key": KEY})
    assert KEY not in repr(provider.settings) and KEY not in repr(provider)


# -- connection options -------------------------------------------------------------------------------


def test_the_default_endpoint_is_googles_stream_url(config):
    """The transport is the extension point (CONVENTIONS): an httpx.MockTransport needs no server."""
    body = b"".join(encode(item) for item in text_answer("Mocked."))
    seen = []

    def handle(request):
        seen.append((str(request.url), request.headers["x-goog-api-key"]))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    configure(providers={"gemini": {"adapter": "gemini", "api_key": KEY, "transport": httpx.MockTransport(handle)}})

    assert SupportAgent.ask("Hi").response == "Mocked."
    assert seen == [("https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", KEY)]


def test_a_model_id_cannot_change_the_path_or_the_query(config, server):
    configure(providers={"gemini": {"adapter": "gemini", "base_url": server.base_url, "api_key": KEY, "allow_insecure_http": True}})
    server.reply(stream(text_answer("ok")), stream(text_answer("ok")))

    class OddAgent(Agent):
        model = "gemini:models/gemini-2.5-flash"

    class SneakyAgent(Agent):
        model = "gemini:gemini-2.5-flash?key=x#"

    assert OddAgent.ask("Hi").response == "ok"
    assert SneakyAgent.ask("Hi").response == "ok"
    assert [received.path for received in server.received] == [
        STREAM_PATH,
        "/v1beta/models/gemini-2.5-flash%3Fkey%3Dx%23:streamGenerateContent?alt=sse",
    ]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"base_url": "http://gemini.example.test"}, "plain HTTP"),
        ({"api_version": ""}, "api_version must be a non-empty string"),
        ({"project": "support-bots"}, r"unknown option 'project'; the gemini adapter accepts: .*api_version"),
        ({"timeout": 0}, "timeout must be a positive number"),
    ],
)
def test_bad_connection_options_are_configuration_errors_naming_the_option(config, options, problem):
    configure(providers={"gemini": {"adapter": "gemini", "api_key": KEY, **options}})

    with pytest.raises(ConfigurationError, match=problem):
        SupportAgent.ask("Hi")

