"""The anthropic adapter's pure parts: request bodies, event folding and error mapping,
for the cases a run rarely shows."""

from __future__ import annotations

import pytest

from lg_core import (
    ConfigurationError,
    ContextWindowOverflowError,
    HTTPError,
    ProtocolError,
    ProviderError,
    UnsupportedInputError,
)
from lg_core.content import Document, Image, Reasoning, Text, ToolResult, ToolUse
from lg_core.messages import Message
from lg_core.models.request import ModelCapabilities, ModelRequest, ToolSpecification
from lg_core.providers._http.errors import ErrorReply
from lg_core.providers.anthropic._errors import provider_error
from lg_core.providers.anthropic._request import build_body
from lg_core.providers.anthropic._stream import EventReader
from tests.providers.anthropic_server import (
    block_start,
    block_stop,
    delta,
    message_delta,
    message_start,
    redacted_thinking_block,
    text_block,
    thinking_block,
)

PNG = b"\x89PNG\r\n\x1a\n"
LOOKUP = ToolSpecification("lookup", "Look up a topic.", {"type": "object"})
CALL = ToolUse(id="toolu_a", name="lookup", input={"topic": "x"})


def body(*messages, native=False, **fields):
    request = ModelRequest(messages=messages or (Message(role="user", content="Hi"),), **fields)
    capabilities = ModelCapabilities(tools=True, tool_choice=True, native_structured_output=native)
    return build_body(request, "claude-haiku-4-5", capabilities)


def user(*content):
    return Message(role="user", content=list(content))


# -- messages ----------------------------------------------------------------------------------------


def test_system_messages_join_the_system_prompt_and_consecutive_roles_merge():
    messages = body(
        Message(role="system", content="Policy v2 applies."),
        user(Text(text="First.")),
        user(Text(text="Second.")),
        system="Answer briefly.",
    )

    assert messages["system"] == "Answer briefly.\n\nPolicy v2 applies."
    assert messages["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "First."}, {"type": "text", "text": "Second."}]}
    ]


def test_an_empty_answer_is_left_out_rather_than_sent_as_empty_content():
    """The API refuses an assistant message with no content; an empty answer before a repair says nothing."""
    wire = body(
        user(Text(text="Triage this.")),
        Message(role="assistant", content=[Text(text="")]),
        user(Text(text="Answer again.")),
    )

    assert wire["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Triage this."}, {"type": "text", "text": "Answer again."}],
        }
    ]


def test_documents_are_sent_as_pdf_or_plain_text_with_their_title():
    csv = Document(data=b"order,status\nA-17,shipped\n", media_type="text/csv", name="orders.csv")
    pdf = Document(data=b"%PDF-1.7", media_type="application/pdf", name="guide.pdf")

    [message] = body(user(Text(text="Check these."), csv, pdf))["messages"]

    assert message["content"][1:] == [
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "order,status\nA-17,shipped\n"},
            "title": "orders.csv",
        },
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjc="},
            "title": "guide.pdf",
        },
    ]


def test_a_binary_document_claude_cannot_read_is_refused_by_name():
    sheet = Document(data=b"PK\x03\x04", media_type="application/vnd.ms-excel", name="q3.xls")

    with pytest.raises(
        UnsupportedInputError, match=r"document 'q3.xls' of type 'application/vnd.ms-excel'.*PDFs and text"
    ):
        body(user(Text(text="Sum it."), sheet))


def test_tool_results_carry_their_media_and_error_flag_and_lead_the_user_message():
    results = Message(
        role="tool",
        content=[
            ToolResult(
                tool_use_id="toolu_a",
                content=(Text(text="Chart:"), Image(data=PNG, media_type="image/png")),
                status="success",
            ),
            ToolResult(tool_use_id="toolu_b", content="boom", status="error"),
            ToolResult(tool_use_id="toolu_c", content=(), status="success"),
        ],
    )
    calls = Message(
        role="assistant",
        content=[CALL, ToolUse(id="toolu_b", name="lookup", input={}), ToolUse(id="toolu_c", name="lookup", input={})],
    )

    messages = body(user(Text(text="Go")), calls, results, user(Text(text="Also, hurry.")))["messages"]

    assert messages[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_a",
                "content": [
                    {"type": "text", "text": "Chart:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                ],
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_b",
                "content": [{"type": "text", "text": "boom"}],
                "is_error": True,
            },
            {"type": "tool_result", "tool_use_id": "toolu_c"},
            {"type": "text", "text": "Also, hurry."},
        ],
    }


def test_signed_and_redacted_thinking_go_back_and_unsigned_reasoning_stays_out():
    answer = Message(
        role="assistant",
        content=[
            Reasoning(text="Another provider's reasoning."),
            Reasoning(text="Claude's thinking.", signature="sig-1"),
            Reasoning(redacted_content=b"EmwKAhgBEgy3va3pzix"),
            Text(text="Looking."),
            CALL,
        ],
    )

    [_, assistant] = body(user(Text(text="Go")), answer)["messages"]

    assert assistant["content"] == [
        {"type": "thinking", "thinking": "Claude's thinking.", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_a", "name": "lookup", "input": {"topic": "x"}},
    ]


def test_an_attachment_in_an_assistant_message_is_refused():
    with pytest.raises(UnsupportedInputError, match="cannot send a Image block in an assistant message"):
        body(user(Text(text="Go")), Message(role="assistant", content=[Image(data=PNG, media_type="image/png")]))


# -- tools, settings, structured output ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        ("lookup", {"type": "tool", "name": "lookup"}),
        ({"name": "lookup"}, {"type": "tool", "name": "lookup"}),
        ({"type": "any", "disable_parallel_tool_use": True}, {"type": "any", "disable_parallel_tool_use": True}),
    ],
)
def test_tool_choice_takes_anthropics_form(choice, wire):
    assert body(tools=(LOOKUP,), tool_choice=choice)["tool_choice"] == wire


def test_a_tool_choice_that_is_not_a_name_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="tool_choice must be"):
        body(tools=(LOOKUP,), tool_choice=3)


def test_settings_are_sent_as_given_but_may_not_replace_what_the_adapter_builds():
    wire = body(settings={"max_tokens": 64000, "stop_sequences": ["###"], "top_k": 5})

    assert (wire["max_tokens"], wire["stop_sequences"], wire["top_k"]) == (64000, ["###"], 5)
    with pytest.raises(ConfigurationError, match="model setting 'system' cannot be set"):
        body(settings={"system": "Other prompt."})


def test_output_config_carries_the_schema_only_with_native_structured_output():
    schema = {"name": "triage", "schema": {"type": "object", "additionalProperties": False}}

    assert body(native=True, output_schema=schema)["output_config"] == {
        "format": {"type": "json_schema", "schema": schema["schema"]}
    }
    assert "output_config" not in body(output_schema=schema)
    with pytest.raises(ConfigurationError, match="'output_config' must be a mapping"):
        body(native=True, output_schema=schema, settings={"output_config": "low"})


# -- event folding ----------------------------------------------------------------------------------


def fold(*events):
    reader = EventReader("anthropic:claude", sequence=2, endpoint="here")
    emitted = [event for payload in events for event in reader.feed(payload)]
    return emitted, list(reader.finish())


def test_thinking_redacted_thinking_and_text_become_blocks_in_stream_order():
    emitted, finished = fold(
        message_start(),
        *thinking_block(0, "Hmm, ", "ok.", signature="sig-9"),
        *redacted_thinking_block(1, "EmwKAhgB"),
        *text_block(2, "Answer."),
        message_delta("end_turn", 30),
    )

    assert [(e.type, e.data["text"]) for e in emitted] == [
        ("reasoning_delta", "Hmm, "),
        ("reasoning_delta", "ok."),
        ("text_delta", "Answer."),
    ]
    response = finished[-1].data["response"]
    assert response.message.content == (
        Reasoning(text="Hmm, ok.", signature="sig-9"),
        Reasoning(redacted_content=b"EmwKAhgB"),
        Text(text="Answer."),
    )


def test_blocks_and_deltas_this_adapter_has_no_use_for_are_skipped():
    """Citations on a text block, a server tool's blocks: nothing an agent loop acts on."""
    _, finished = fold(
        message_start(),
        block_start(0, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
        block_stop(0),
        *text_block(1, "Per the guide, 30 days.")[:2],
        delta(1, type="citations_delta", citation={"type": "char_location", "cited_text": "30 days"}),
        block_stop(1),
        message_delta("end_turn", 12),
    )

    assert finished[-1].data["response"].message.content == (Text(text="Per the guide, 30 days."),)


def test_a_delta_of_the_wrong_kind_for_its_block_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="sent a input_json_delta for content block 0, a text block"):
        fold(
            message_start(),
            block_start(0, {"type": "text", "text": ""}),
            delta(0, type="input_json_delta", partial_json="{}"),
        )


def test_a_block_started_twice_or_continued_after_its_stop_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="started content block 0 twice"):
        fold(message_start(), *text_block(0, "a"), block_start(0, {"type": "text", "text": ""}))
    with pytest.raises(ProtocolError, match="after it stopped"):
        fold(message_start(), *text_block(0, "a"), delta(0, type="text_delta", text="b"))


@pytest.mark.parametrize(
    ("wire", "ours"),
    [
        ("end_turn", "end_turn"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("refusal", "content_filter"),
        ("model_context_window_exceeded", "max_tokens"),
        ("pause_turn", "other"),
        ("something_new", "other"),
    ],
)
def test_stop_reasons_map_to_ours_and_the_original_is_kept(wire, ours):
    _, finished = fold(message_start(), *text_block(0, "x"), message_delta(wire, 3))

    assert finished[-1].data["stop_reason"] == ours
    assert finished[-1].data["response"].metadata["provider_stop_reason"] == wire


def test_usage_takes_the_final_counts_of_message_delta():
    final = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"input_tokens": 30, "cache_read_input_tokens": 100, "output_tokens": 77},
    }

    _, finished = fold(message_start(25, cache_read=90), *text_block(0, "x"), final)

    usage = finished[-2].data["usage"]
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (30, 100, 77)


# -- error mapping ---------------------------------------------------------------------------------


def anthropic_error(kind, message):
    return f'{{"type":"error","error":{{"type":"{kind}","message":"{message}"}},"request_id":"req_1"}}'


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (400, "invalid_request_error", False),
        (401, "authentication_error", False),
        (403, "permission_error", False),
        (404, "not_found_error", False),
        (413, "request_too_large", False),
        (429, "rate_limit_error", True),
        (500, "api_error", True),
        (529, "overloaded_error", True),
    ],
)
def test_status_errors_are_retryable_only_when_repeating_may_succeed(status, kind, retryable):
    error = provider_error(ErrorReply(status, anthropic_error(kind, "nope"), retry_after=3.0), endpoint="here")

    assert type(error) is HTTPError
    assert (error.status, error.retryable, error.error_type, error.request_id, error.retry_after) == (
        status,
        retryable,
        kind,
        "req_1",
        3.0,
    )
    assert str(error).startswith(f"here answered {status} ")


def test_the_context_limit_in_anthropics_words_is_a_context_window_overflow():
    message = (
        "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
        "decrease input length or `max_tokens` and try again"
    )

    error = provider_error(ErrorReply(400, anthropic_error("invalid_request_error", message)), endpoint="here")

    assert type(error) is ContextWindowOverflowError
    assert "188240 + 21333 > 200000" in str(error)


@pytest.mark.parametrize(
    ("kind", "retryable"), [("overloaded_error", True), ("api_error", True), ("invalid_request_error", False)]
)
def test_stream_errors_are_retryable_by_their_type(kind, retryable):
    error = provider_error(ErrorReply(None, anthropic_error(kind, "mid-stream")), endpoint="here")

    assert type(error) is ProviderError
    assert (error.retryable, error.error_type) == (retryable, kind)


def test_an_error_frame_whose_data_is_not_json_keeps_its_text_without_the_key():
    error = provider_error(
        ErrorReply(None, "upstream crashed holding sk-ant-secret"), endpoint="here", secret="sk-ant-secret"
    )

    assert str(error) == "here reported an error mid-stream: upstream crashed holding [redacted]"
