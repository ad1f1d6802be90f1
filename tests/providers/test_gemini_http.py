"""The gemini adapter's own format and options, against a local server speaking Google's
streamGenerateContent format over real HTTP.

What every HTTP adapter must do (retries, errors, malformed streams, cancellation,
deadlines, credentials, the shared options) is checked for this one too by the
conformance suite, ``test_http_conformance``; this module checks what is Gemini's:
the request body, path and headers, thought summaries and signatures, function
declarations and responses, call ids, images, structured output, blocked prompts,
Google's error details, ``api_version``. Every test runs whole agent runs through
the engine, so what is checked is what a user sees and what the server received.
"""

from __future__ import annotations

import json

import pytest

from lg_core import (
    Agent,
    ConfigurationError,
    HTTPError,
    ProtocolError,
    ProviderError,
    Tool,
)
from lg_core.content import Image, Reasoning, Text
from lg_core.messages import Message
from tests.providers.agents import (
    PNG,
    LookupTool,
    ScreenshotAgent,
    SupportAgent,
    ToolAgent,
    retries,
    retry_reasons,
    types,
    use_connection,
)
from tests.providers.gemini_server import (
    MODEL_VERSION,
    RESPONSE_ID,
    SIGNATURE,
    call,
    calls_answer,
    chunk,
    encode,
    error,
    error_info,
    retry_info,
    serve,
    stream,
    text,
    text_answer,
    thought,
    usage,
)

KEY = "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
STREAM_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


@pytest.fixture
def server():
    yield from serve()


def connect(server=None, **options):
    """The ``gemini`` connection, every agent's model (``gemini:gemini-2.5-flash``), to ``server``."""
    use_connection("gemini:gemini-2.5-flash", {"adapter": "gemini", "api_key": KEY, **options}, server)


@pytest.fixture
def connection(config, server):
    connect(server, headers={"x-goog-user-project": "support-bots"})
    return server


# -- requests and answers ------------------------------------------------------------------------------


def test_a_run_sends_a_stream_request_for_the_model_with_the_key_in_a_header_and_the_settings(connection):
    connection.reply(stream(text_answer("Refunds take ", "30 days.")))

    run = SupportAgent.ask("How long do refunds take?", settings={"temperature": 0.2, "max_tokens": 200})

    assert run.outcome == "completed", run.error
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


def test_a_stream_framed_with_bare_newlines_reads_the_same(connection):
    """A proxy may re-frame Google's CRLF CRLF with LF LF; both are SSE."""
    frames = [encode(item).replace(b"\r\n", b"\n") for item in text_answer("Same ", "answer.")]
    connection.reply(stream(frames))

    assert SupportAgent.ask("Hi").response == "Same answer."


def test_cached_and_thinking_tokens_are_counted_apart_from_the_rest(connection):
    counts = usage(1200, 30, thoughts=250, cached=1000)
    connection.reply(stream([chunk(text("ok"), finish="STOP", counts=counts)]))

    run = SupportAgent.ask("Hi")

    assert (
        run.usage.input_tokens,
        run.usage.cache_read_tokens,
        run.usage.output_tokens,
        run.usage.reasoning_tokens,
    ) == (200, 1000, 30, 250)
    assert run.usage.total_tokens == 1200 + 30 + 250


def test_thought_summaries_stream_as_reasoning_and_stay_out_of_the_next_request(connection):
    connection.reply(
        stream(
            [
                chunk(thought("**Checking the policy**\n\n")),
                chunk(thought("Refunds need a lookup.")),
                *calls_answer(call("lookup", {"topic": "refunds"})),
            ]
        ),
        stream(text_answer("Refunds take 30 days.")),
    )
    settings = {"thinking_config": {"includeThoughts": True, "thinkingBudget": 1024}}

    run = ToolAgent.stream_ask("Can I get a refund?", settings=settings)
    events = list(run)

    assert run.outcome == "completed", run.error
    assert [e.data["text"] for e in events if e.type == "reasoning_delta"] == [
        "**Checking the policy**\n\n",
        "Refunds need a lookup.",
    ]
    first, second = connection.received
    assert first.body["generationConfig"] == {"thinkingConfig": {"includeThoughts": True, "thinkingBudget": 1024}}
    assert second.body["contents"][1] == {
        "role": "model",
        "parts": [{"functionCall": {"name": "lookup", "args": {"topic": "refunds"}}}],
    }
    assert run.result.messages[1].content[0] == Reasoning(text="**Checking the policy**\n\nRefunds need a lookup.")


def test_a_blocked_prompt_fails_the_run_without_a_retry(connection):
    blocked = {
        "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": usage(8),
        "modelVersion": MODEL_VERSION,
        "responseId": RESPONSE_ID,
    }
    connection.reply(stream([blocked]))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProviderError
    assert "blocked the prompt (PROHIBITED_CONTENT)" in str(run.error)
    assert (run.error.retryable, run.error.error_type) == (False, "PROHIBITED_CONTENT")
    assert len(connection.received) == 1


# -- tools -------------------------------------------------------------------------------------------


def test_a_function_call_streams_whole_and_its_result_goes_back_as_a_function_response(connection):
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
    assert call_events[:2] == [
        ("tool_call_start", {"id": call_id, "name": "lookup"}),
        ("tool_call_delta", {"id": call_id, "arguments": '{"topic":"refunds"}'}),
    ]
    first, second = connection.received
    assert first.body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "lookup",
                    "description": "Look up a help center entry by topic.",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {"topic": {"type": "STRING"}},
                        "required": ["topic"],
                    },
                }
            ]
        }
    ]
    assert second.body["contents"][1:] == [
        {
            "role": "model",
            "parts": [{"text": "Let me check."}, {"functionCall": {"name": "lookup", "args": {"topic": "refunds"}}}],
        },
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "lookup", "response": {"output": "entry for refunds"}}}],
        },
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
            {
                "functionResponse": {
                    "name": "lookup",
                    "response": {"error": results["parts"][1]["functionResponse"]["response"]["error"]},
                }
            },
        ],
    }
    assert "not in the help center" in results["parts"][1]["functionResponse"]["response"]["error"]


def test_ids_and_signatures_gemini_issues_go_back_as_they_came(connection):
    """Gemini 3 signs the first of parallel calls and refuses the next request without the signature."""
    connection.reply(
        stream(
            calls_answer(
                call("lookup", {"topic": "refunds"}, call_id="bu4kjcsx", signature=SIGNATURE),
                call("lookup", {"topic": "returns"}, call_id="lde815f6"),
            )
        ),
        stream([chunk(text("Both looked up.")), chunk(text("", signature="Eu4BCusBAQw51sfrm"), finish="STOP")]),
    )

    run = ToolAgent.ask("Refunds and returns?")

    assert run.outcome == "completed", run.error
    assert run.response == "Both looked up."
    second = connection.received[1].body["contents"]
    assert second[1] == {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "lookup", "args": {"topic": "refunds"}, "id": "bu4kjcsx"},
                "thoughtSignature": SIGNATURE,
            },
            {"functionCall": {"name": "lookup", "args": {"topic": "returns"}, "id": "lde815f6"}},
        ],
    }
    assert [part["functionResponse"]["id"] for part in second[2]["parts"]] == ["bu4kjcsx", "lde815f6"]
    final = run.result.messages[-1]
    assert final.text == "Both looked up."
    assert isinstance(final.content[-1], Reasoning) and final.content[-1].text == ""


def test_a_tool_without_parameters_is_declared_without_them_and_its_image_follows_the_response(connection):
    connection.reply(stream(calls_answer(call("screenshot"))), stream(text_answer("The order shows as shipped.")))

    run = ScreenshotAgent.ask("What does my order page say?")

    assert run.outcome == "completed", run.error
    first, second = connection.received
    assert first.body["tools"] == [
        {
            "functionDeclarations": [
                {"name": "screenshot", "description": "Take a screenshot of the customer's order page."}
            ]
        }
    ]
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
    question = Message(
        role="user",
        content=[Text(text="What is this?"), Image(data=b"GIF89a", media_type="image/gif", name="scan.gif")],
    )

    run = SupportAgent.ask(question)

    assert run.outcome == "failed"
    assert "image 'scan.gif' of type 'image/gif'" in str(run.error)
    assert "image/png" in str(run.error)
    assert connection.received == []


def test_a_tool_schema_gemini_cannot_express_fails_the_run_naming_the_tool_and_path(connection):
    class TagTool(Tool):
        description = "Tag the ticket."
        input_schema = {
            "type": "object",
            "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}},
        }

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
    "properties": {
        "category": {"type": "string", "enum": ["billing", "delivery"]},
        "urgent": {"type": "boolean"},
        "note": {"type": ["string", "null"]},
    },
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
    connection.reply(
        stream(calls_answer(call("submit_result", {"category": "delivery", "urgent": True, "note": None})))
    )

    run = TriageAgent.ask("My package is missing.")

    assert run.outcome == "completed", run.error
    assert run.result.output == {"category": "delivery", "urgent": True, "note": None}
    body = connection.received[0].body
    [declaration] = body["tools"][0]["functionDeclarations"]
    assert (declaration["name"], declaration["parameters"]) == ("submit_result", GEMINI_TRIAGE)
    assert "generationConfig" not in body


def test_native_structured_output_is_sent_as_a_response_schema_when_the_connection_enables_it(config, server):
    connect(server, capabilities={"native_structured_output": True})
    answer = json.dumps({"category": "billing", "urgent": False, "note": "charged twice"})
    server.reply(stream(text_answer(answer[:10], answer[10:])))

    run = TriageAgent.ask("I was charged twice.", settings={"temperature": 0})

    assert run.outcome == "completed", run.error
    assert run.result.output == {"category": "billing", "urgent": False, "note": "charged twice"}
    body = server.received[0].body
    assert body["generationConfig"] == {
        "temperature": 0,
        "responseMimeType": "application/json",
        "responseSchema": GEMINI_TRIAGE,
    }
    assert "tools" not in body


def test_a_model_that_refuses_a_response_schema_beside_tools_says_what_to_change(config, server):
    connect(server, capabilities={"native_structured_output": True})
    server.reply(
        error(400, "INVALID_ARGUMENT", "Function calling with a response mime type: 'application/json' is unsupported")
    )

    class ToolTriageAgent(TriageAgent):
        tools = [LookupTool]

    run = ToolTriageAgent.ask("Triage this.")

    assert run.outcome == "failed"
    assert "capabilities.native_structured_output off" in str(run.error)


# -- errors and retries ------------------------------------------------------------------------------


def test_a_rate_limit_that_keeps_refusing_fails_the_run_with_the_wait_its_retry_info_asked_for(connection):
    """Google states the wait in a ``google.rpc.RetryInfo`` detail, not in a Retry-After header."""
    connection.reply(
        *[
            error(
                429,
                "RESOURCE_EXHAUSTED",
                "Resource has been exhausted (e.g. check quota).",
                details=[retry_info("0.1s")],
            )
            for _ in range(3)
        ]
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError)
    assert (run.error.status, run.error.retryable, run.error.retry_after, run.error.error_type) == (
        429,
        True,
        0.1,
        "RESOURCE_EXHAUSTED",
    )
    assert "429 Too Many Requests: Resource has been exhausted (e.g. check quota) (RESOURCE_EXHAUSTED)." in str(
        run.error
    )
    assert types(run).count("model_retry") == 2
    assert len(connection.received) == 3


def test_a_wrong_api_key_says_to_check_the_key(connection):
    connection.reply(
        error(
            400,
            "INVALID_ARGUMENT",
            "API key not valid. Please pass a valid API key.",
            details=[error_info("API_KEY_INVALID")],
        )
    )

    run = SupportAgent.ask("Hi")

    assert isinstance(run.error, HTTPError) and run.error.retryable is False
    assert str(run.error).endswith(
        "API key not valid. Please pass a valid API key (INVALID_ARGUMENT). "
        "Check the connection's api_key or api_key_env."
    )


def test_a_malformed_function_call_is_retried(connection):
    bad = chunk(
        finish="MALFORMED_FUNCTION_CALL",
        finish_message="Malformed function call: print(default_api.lookup(topic='refunds'",
    )
    connection.reply(
        stream([bad]), stream(calls_answer(call("lookup", {"topic": "refunds"}))), stream(text_answer("Done."))
    )

    run = ToolAgent.ask("Refunds?")

    assert run.outcome == "completed", run.error
    [retry] = retries(run)
    assert retry.data["error_class"] == "MalformedToolCallError"
    assert "MALFORMED_FUNCTION_CALL" in retry_reasons(run)[0] and "default_api.lookup" in retry_reasons(run)[0]


# -- malformed streams ----------------------------------------------------------------------------------


def test_parts_that_are_not_a_list_are_a_protocol_error(connection):
    broken = {
        "candidates": [{"content": {"parts": {"text": "Hi"}, "role": "model"}, "finishReason": "STOP", "index": 0}]
    }
    connection.reply(stream([broken]))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ProtocolError
    assert "content.parts is not a list" in str(run.error)


# -- connection options -------------------------------------------------------------------------------


def test_api_version_is_the_first_segment_of_the_path(config, server):
    connect(server, api_version="v1")
    server.reply(stream(text_answer("ok")))

    assert SupportAgent.ask("Hi").response == "ok"
    assert server.received[0].path == "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


def test_a_model_id_cannot_change_the_path_or_the_query(config, server):
    connect(server)
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


def test_an_empty_api_version_is_a_configuration_error(config):
    connect(api_version="")

    with pytest.raises(ConfigurationError, match="api_version must be a non-empty string"):
        SupportAgent.ask("Hi")
