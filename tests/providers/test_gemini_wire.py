"""The gemini adapter's pure parts: request bodies, chunk folding, signatures and error mapping,
for the cases a run rarely shows."""

from __future__ import annotations

import json

import pytest

from lg_core import (
    ConfigurationError,
    ContextWindowOverflowError,
    HTTPError,
    MalformedToolCallError,
    ProtocolError,
    ProviderError,
    UnsupportedInputError,
)
from lg_core.content import Document, Image, Reasoning, Text, ToolResult, ToolUse
from lg_core.messages import Message
from lg_core.models.request import ModelCapabilities, ModelRequest, ToolSpecification
from lg_core.providers._http.errors import ErrorReply
from lg_core.providers.gemini._errors import provider_error
from lg_core.providers.gemini._request import build_body
from lg_core.providers.gemini._stream import ChunkReader
from tests.providers.gemini_server import (
    SIGNATURE,
    call,
    chunk,
    error_body,
    retry_info,
    text,
    thought,
    usage,
)

PNG = b"\x89PNG\r\n\x1a\n"
LOOKUP = ToolSpecification(
    "lookup", "Look up a topic.", {"type": "object", "properties": {"topic": {"type": "string"}}}
)


def body(*messages, native=False, **fields):
    request = ModelRequest(messages=messages or (Message(role="user", content="Hi"),), **fields)
    capabilities = ModelCapabilities(tools=True, tool_choice=True, native_structured_output=native)
    return build_body(request, "gemini-2.5-flash", capabilities)


def user(*content):
    return Message(role="user", content=list(content))


def model(*content):
    return Message(role="assistant", content=list(content))


def fold(*chunks, sequence=2):
    reader = ChunkReader("gemini:gemini-2.5-flash", sequence=sequence, endpoint="here")
    emitted = [event for payload in chunks for event in reader.feed(payload)]
    return emitted, list(reader.finish())


# -- contents ----------------------------------------------------------------------------------------


def test_system_messages_join_the_system_instruction_and_consecutive_roles_merge():
    wire = body(
        Message(role="system", content="Policy v2 applies."),
        user(Text(text="First.")),
        user(Text(text="Second.")),
        system="Answer briefly.",
    )

    assert wire["systemInstruction"] == {"parts": [{"text": "Answer briefly.\n\nPolicy v2 applies."}]}
    assert wire["contents"] == [{"role": "user", "parts": [{"text": "First."}, {"text": "Second."}]}]


def test_an_empty_answer_is_left_out_rather_than_sent_as_a_turn_without_parts():
    wire = body(user(Text(text="Triage this.")), model(Text(text="")), user(Text(text="Answer again.")))

    assert wire["contents"] == [{"role": "user", "parts": [{"text": "Triage this."}, {"text": "Answer again."}]}]


def test_documents_are_sent_as_inline_data_and_a_binary_one_gemini_cannot_read_is_refused():
    csv = Document(data=b"order,status\nA-17,shipped\n", media_type="text/csv", name="orders.csv")
    pdf = Document(data=b"%PDF-1.7", media_type="application/pdf", name="guide.pdf")
    policy = Document(data=b'{"days": 30}', media_type="application/json", name="policy.json")

    [turn] = body(user(Text(text="Check these."), csv, pdf, policy))["contents"]

    assert turn["parts"][1:] == [
        {"inlineData": {"mimeType": "text/csv", "data": "b3JkZXIsc3RhdHVzCkEtMTcsc2hpcHBlZAo="}},
        {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0xLjc="}},
        {"inlineData": {"mimeType": "text/plain", "data": "eyJkYXlzIjogMzB9"}},
    ]
    sheet = Document(data=b"PK\x03\x04", media_type="application/vnd.ms-excel", name="q3.xls")
    with pytest.raises(
        UnsupportedInputError, match=r"document 'q3.xls' of type 'application/vnd.ms-excel'.*PDFs, UTF-8 text"
    ):
        body(user(Text(text="Sum it."), sheet))


def test_function_responses_lead_the_user_turn_then_its_text_then_the_tools_media():
    calls = model(
        ToolUse(id="gemini_call_0_0", name="lookup", input={"topic": "x"}),
        ToolUse(id="bu4kjcsx", name="chart", input={}),
    )
    results = Message(
        role="tool",
        content=[
            ToolResult(tool_use_id="gemini_call_0_0", content="boom", status="error"),
            ToolResult(
                tool_use_id="bu4kjcsx",
                content=(Text(text="Chart:"), Image(data=PNG, media_type="image/png")),
                status="success",
            ),
        ],
    )

    contents = body(user(Text(text="Go")), calls, results, user(Text(text="Also, hurry.")))["contents"]

    assert contents[1] == {
        "role": "model",
        "parts": [
            {"functionCall": {"name": "lookup", "args": {"topic": "x"}}},
            {"functionCall": {"name": "chart", "args": {}, "id": "bu4kjcsx"}},
        ],
    }
    assert contents[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "lookup", "response": {"error": "boom"}}},
            {"functionResponse": {"name": "chart", "response": {"output": "Chart:"}, "id": "bu4kjcsx"}},
            {"text": "Attachments returned by tool call chart (bu4kjcsx):"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
            {"text": "Also, hurry."},
        ],
    }


def test_a_tool_result_whose_call_is_not_in_the_conversation_is_refused_by_its_id():
    orphan = Message(role="tool", content=[ToolResult(tool_use_id="toolu_1", content="42", status="success")])

    with pytest.raises(
        UnsupportedInputError, match="result of tool call 'toolu_1': the call is not in the conversation"
    ):
        body(user(Text(text="Compute.")), model(ToolUse(id="toolu_9", name="lookup", input={})), orphan)


def test_an_attachment_in_an_assistant_message_is_refused():
    with pytest.raises(UnsupportedInputError, match="cannot send a Image block in an assistant message"):
        body(user(Text(text="Go")), model(Image(data=PNG, media_type="image/png")))


# -- thought signatures ------------------------------------------------------------------------------


def test_signatures_fold_into_blocks_before_their_parts_and_go_back_on_the_same_parts():
    chunks = [
        chunk(thought("Plan: look it up.")),
        chunk(text("Checking "), text("now.")),
        chunk(call("lookup", {"topic": "a"}, signature=SIGNATURE), call("lookup", {"topic": "b"})),
        chunk(text("", signature="closing-sig"), finish="STOP"),
    ]

    _, finished = fold(*chunks)
    message = finished[-1].data["response"].message
    [_, sent] = body(user(Text(text="Go")), message)["contents"]

    assert [type(block).__name__ for block in message.content] == [
        "Reasoning",
        "Text",
        "Reasoning",
        "ToolUse",
        "ToolUse",
        "Reasoning",
    ]
    assert message.content[0] == Reasoning(text="Plan: look it up.")
    assert message.text == "Checking now."
    assert sent["parts"] == [
        {"text": "Checking now."},
        {"functionCall": {"name": "lookup", "args": {"topic": "a"}}, "thoughtSignature": SIGNATURE},
        {"functionCall": {"name": "lookup", "args": {"topic": "b"}}},
        {"text": "", "thoughtSignature": "closing-sig"},
    ]


def test_a_signed_text_part_stands_alone_so_its_signature_stays_on_it():
    _, finished = fold(chunk(text("Hello ")), chunk(text("world", signature="sig-1")), chunk(text("!"), finish="STOP"))
    message = finished[-1].data["response"].message

    assert message.text == "Hello world!"
    assert body(user(Text(text="Hi")), message)["contents"][1]["parts"] == [
        {"text": "Hello "},
        {"text": "world", "thoughtSignature": "sig-1"},
        {"text": "!"},
    ]


def test_a_signed_thought_goes_back_as_a_thought_and_unsigned_reasoning_stays_out():
    _, finished = fold(chunk(thought("Unsigned thinking.")), chunk(text("Answer."), finish="STOP"))
    signed_thought = {"text": "Thinking.", "thought": True, "thoughtSignature": "sig-t"}
    _, signed = fold(chunk(signed_thought), chunk(text("Answer."), finish="STOP"))

    unsigned = body(user(Text(text="Hi")), finished[-1].data["response"].message)["contents"][1]["parts"]
    kept = body(user(Text(text="Hi")), signed[-1].data["response"].message)["contents"][1]["parts"]

    assert unsigned == [{"text": "Answer."}]
    assert kept == [signed_thought, {"text": "Answer."}]


def test_signatures_are_no_anthropic_signature_and_another_providers_reasoning_is_not_sent():
    _, finished = fold(chunk(call("lookup", {"topic": "a"}, signature=SIGNATURE), finish="STOP"))
    marker = finished[-1].data["response"].message.content[0]

    assert marker.signature is None and marker.text == ""
    foreign = model(Reasoning(text="Claude's thinking.", signature="anthropic-sig"), Text(text="Done."))
    assert body(user(Text(text="Hi")), foreign)["contents"][1]["parts"] == [{"text": "Done."}]


# -- chunk folding -----------------------------------------------------------------------------------


def test_calls_without_ids_get_ids_from_the_sequence_and_their_place():
    emitted, finished = fold(
        chunk(
            call("lookup", {"topic": "a"}),
            call("lookup", {"topic": "b"}, call_id="given"),
            call("lookup"),
            finish="STOP",
        ),
        sequence=7,
    )

    uses = finished[-1].data["response"].message.tool_uses
    assert [(use.id, use.input) for use in uses] == [
        ("gemini_call_7_0", {"topic": "a"}),
        ("given", {"topic": "b"}),
        ("gemini_call_7_1", {}),
    ]
    assert finished[-1].data["stop_reason"] == "tool_use"
    assert [e.type for e in emitted] == ["tool_call_start", "tool_call_delta"] * 3


@pytest.mark.parametrize(
    ("reason", "ours"),
    [
        ("STOP", "end_turn"),
        ("MAX_TOKENS", "max_tokens"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("OTHER", "other"),
        ("SOMETHING_NEW", "other"),
    ],
)
def test_finish_reasons_map_to_ours_and_the_original_is_kept(reason, ours):
    _, finished = fold(chunk(text("x"), finish=reason))

    assert finished[-1].data["stop_reason"] == ours
    assert finished[-1].data["response"].metadata["provider_stop_reason"] == reason


def test_usage_is_the_last_chunks_counts():
    _, finished = fold(
        chunk(text("a"), counts=usage(10, 1)), chunk(text("b"), finish="STOP", counts=usage(10, 2, thoughts=5))
    )

    usage_event = finished[-2].data["usage"]
    assert (usage_event.input_tokens, usage_event.output_tokens, usage_event.reasoning_tokens) == (10, 2, 5)


def test_a_chunk_with_usage_only_and_unknown_parts_add_nothing():
    code = {"executableCode": {"language": "PYTHON", "code": "print(1)"}}
    emitted, finished = fold(chunk(code), {"usageMetadata": usage(9, 3)}, chunk(text("Done."), finish="STOP"))

    assert [e.type for e in emitted] == ["text_delta"]
    assert finished[-1].data["response"].message.content == (Text(text="Done."),)


@pytest.mark.parametrize("args", [[], "topic=a", 3])
def test_call_arguments_that_are_not_an_object_are_a_malformed_tool_call(args):
    with pytest.raises(MalformedToolCallError, match="tool call 'lookup'"):
        fold(chunk(call("lookup", args), finish="STOP"))


def test_a_part_that_is_not_an_object_or_text_that_is_not_a_string_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="content part that is not a JSON object"):
        fold(chunk("plain"))
    with pytest.raises(ProtocolError, match="text part whose text is not a string"):
        fold(chunk({"text": 3}))


# -- tools, settings, structured output ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        ("lookup", {"mode": "ANY", "allowedFunctionNames": ["lookup"]}),
        ({"name": "lookup"}, {"mode": "ANY", "allowedFunctionNames": ["lookup"]}),
        ({"mode": "VALIDATED"}, {"mode": "VALIDATED"}),
    ],
)
def test_tool_choice_becomes_a_function_calling_config(choice, wire):
    assert body(tools=(LOOKUP,), tool_choice=choice)["toolConfig"] == {"functionCallingConfig": wire}


def test_a_tool_choice_that_is_not_a_name_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="tool_choice must be"):
        body(tools=(LOOKUP,), tool_choice=3)


def test_settings_go_to_generation_config_or_beside_it_but_may_not_replace_what_the_adapter_builds():
    safety = [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"}]
    wire = body(
        settings={
            "max_tokens": 64,
            "top_k": 5,
            "stopSequences": ["###"],
            "generation_config": {"seed": 7},
            "safety_settings": safety,
            "cached_content": "cachedContents/abc",
        }
    )

    assert wire["generationConfig"] == {"maxOutputTokens": 64, "topK": 5, "stopSequences": ["###"], "seed": 7}
    assert (wire["safetySettings"], wire["cachedContent"]) == (safety, "cachedContents/abc")
    with pytest.raises(ConfigurationError, match="model setting 'system_instruction' cannot be set"):
        body(settings={"system_instruction": "Other prompt."})
    with pytest.raises(ConfigurationError, match="model setting 'candidateCount' cannot be set"):
        body(settings={"candidateCount": 2})
    with pytest.raises(ConfigurationError, match="must be a mapping of generationConfig fields"):
        body(settings={"generationConfig": "fast"})


def test_a_response_schema_is_sent_only_with_native_structured_output():
    schema = {
        "name": "triage",
        "schema": {
            "type": "object",
            "properties": {"urgent": {"type": "boolean"}},
            "required": ["urgent"],
            "additionalProperties": False,
        },
    }

    assert body(native=True, output_schema=schema)["generationConfig"] == {
        "responseMimeType": "application/json",
        "responseSchema": {"type": "OBJECT", "properties": {"urgent": {"type": "BOOLEAN"}}, "required": ["urgent"]},
    }
    assert "generationConfig" not in body(output_schema=schema)
    with pytest.raises(
        ConfigurationError,
        match="result schema 'triage' cannot be sent to Gemini: at /properties/urgent, keyword 'not' has no equivalent",
    ):
        body(
            native=True,
            output_schema={
                "name": "triage",
                "schema": {"type": "object", "properties": {"urgent": {"not": {"type": "string"}}}},
            },
        )


# -- error mapping ---------------------------------------------------------------------------------


def google_error(code, status, message, details=None):
    return json.dumps(error_body(code, status, message, details))


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        (400, "INVALID_ARGUMENT", False),
        (400, "FAILED_PRECONDITION", False),
        (403, "PERMISSION_DENIED", False),
        (404, "NOT_FOUND", False),
        (429, "RESOURCE_EXHAUSTED", True),
        (500, "INTERNAL", True),
        (503, "UNAVAILABLE", True),
        (504, "DEADLINE_EXCEEDED", True),
    ],
)
def test_status_errors_are_retryable_only_when_repeating_may_succeed(status, code, retryable):
    error = provider_error(ErrorReply(status, google_error(status, code, "nope")), endpoint="here")

    assert type(error) is HTTPError
    assert (error.status, error.retryable, error.error_type, error.retry_after) == (status, retryable, code, None)
    assert str(error).startswith(f"here answered {status} ")


def test_the_wait_comes_from_retry_after_first_then_from_retry_info():
    body_text = google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", [retry_info("37s")])

    assert provider_error(ErrorReply(429, body_text), endpoint="here").retry_after == 37.0
    assert provider_error(ErrorReply(429, body_text, retry_after=2.0), endpoint="here").retry_after == 2.0
    garbled = google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", [retry_info("soon")])
    assert provider_error(ErrorReply(429, garbled), endpoint="here").retry_after is None


def test_an_error_body_in_a_list_is_read_like_a_bare_one():
    error = provider_error(
        ErrorReply(404, "[" + google_error(404, "NOT_FOUND", "models/x is not found") + "]"), endpoint="here"
    )

    assert (error.error_type, str(error)) == (
        "NOT_FOUND",
        "here answered 404 Not Found: models/x is not found (NOT_FOUND).",
    )


def test_the_context_limit_in_geminis_words_is_a_context_window_overflow():
    message = "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."

    error = provider_error(ErrorReply(400, google_error(400, "INVALID_ARGUMENT", message)), endpoint="here")

    assert type(error) is ContextWindowOverflowError
    assert "(1200000) exceeds the maximum number of tokens allowed (1048576)" in str(error)


@pytest.mark.parametrize(
    ("code", "retryable"), [("UNAVAILABLE", True), ("INTERNAL", True), ("INVALID_ARGUMENT", False)]
)
def test_stream_errors_are_retryable_by_their_code(code, retryable):
    error = provider_error(ErrorReply(None, google_error(400, code, "mid-stream")), endpoint="here")

    assert type(error) is ProviderError
    assert (error.retryable, error.error_type) == (retryable, code)


def test_an_error_that_is_not_googles_json_keeps_its_text_without_the_key():
    error = provider_error(
        ErrorReply(502, "upstream crashed holding AIza-secret"), endpoint="here", secret="AIza-secret"
    )

    assert str(error) == "here answered 502 Bad Gateway: upstream crashed holding [redacted]."
    assert error.retryable is True
