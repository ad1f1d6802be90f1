"""The openai adapter's pure parts: request bodies and chunk folding, for the cases a run rarely shows."""

from __future__ import annotations

import pytest

from lg_core import ConfigurationError, HTTPError, MalformedToolCallError, ProviderError
from lg_core.content import Document, Image, Text, ToolResult, ToolUse
from lg_core.messages import Message
from lg_core.models.request import ModelCapabilities, ModelRequest, ToolSpecification
from lg_core.providers import MAX_ERROR_BODY_CHARS
from lg_core.providers.openai._errors import ErrorReply, provider_error
from lg_core.providers.openai._request import build_body
from lg_core.providers.openai._stream import ChunkReader

PNG = b"\x89PNG\r\n\x1a\n"
LOOKUP = ToolSpecification("lookup", "Look up a topic.", {"type": "object"})


def body(permissive=True, **fields):
    request = ModelRequest(messages=fields.pop("messages", (Message(role="user", content="Hi"),)), **fields)
    capabilities = ModelCapabilities.permissive() if permissive else ModelCapabilities(tools=True)
    return build_body(request, "gpt-4o-mini", capabilities)


def test_an_image_is_sent_as_a_data_url_content_part():
    message = Message(role="user", content=[Text(text="What is this?"), Image(data=PNG, media_type="image/png")])

    [user] = body(messages=(message,))["messages"]

    assert user["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]


def test_a_text_document_is_sent_as_text_and_a_pdf_as_a_file():
    """Chat Completions takes only PDFs as file parts; OpenAI's advice for other files is their text."""
    csv = Document(data=b"order,status\nA-17,shipped\n", media_type="text/csv", name="orders.csv")
    pdf = Document(data=b"%PDF-1.7", media_type="application/pdf", name="guide.pdf")

    [user] = body(messages=(Message(role="user", content=[Text(text="Check these."), csv, pdf]),))["messages"]

    assert user["content"][1] == {"type": "text", "text": "Document orders.csv:\norder,status\nA-17,shipped\n"}
    assert user["content"][2] == {
        "type": "file",
        "file": {"filename": "guide.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjc="},
    }


def test_an_error_tool_result_says_so_and_each_result_is_its_own_tool_message():
    results = Message(
        role="tool",
        content=[
            ToolResult(tool_use_id="a", content="boom", status="error"),
            ToolResult(tool_use_id="b", content="fine", status="success"),
        ],
    )
    calls = Message(
        role="assistant", content=[ToolUse(id="a", name="lookup", input={}), ToolUse(id="b", name="lookup", input={})]
    )

    messages = body(messages=(Message(role="user", content="Go"), calls, results))["messages"]

    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "a", "content": "Error: boom"},
        {"role": "tool", "tool_call_id": "b", "content": "fine"},
    ]


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", "auto"),
        ("required", "required"),
        ("lookup", {"type": "function", "function": {"name": "lookup"}}),
        ({"name": "lookup"}, {"type": "function", "function": {"name": "lookup"}}),
    ],
)
def test_tool_choice_names_force_that_function(choice, wire):
    assert body(tools=(LOOKUP,), tool_choice=choice)["tool_choice"] == wire


def test_response_format_needs_native_structured_output_and_a_wire_safe_name():
    schema = {"name": "support triage!", "description": "Triage.", "schema": {"type": "object"}}

    assert body(output_schema=schema)["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "support_triage_",
            "strict": True,
            "schema": {"type": "object"},
            "description": "Triage.",
        },
    }
    assert "response_format" not in body(permissive=False, output_schema=schema)


def test_a_setting_may_not_replace_what_the_adapter_builds():
    with pytest.raises(ConfigurationError, match="model setting 'stream' cannot be set"):
        body(settings={"stream": False})


def fragment(index, **fields):
    return {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, **fields}]}, "finish_reason": None}]}


def test_a_tool_call_whose_name_comes_late_still_starts_before_its_arguments():
    reader = ChunkReader("local:m", sequence=3)
    events = [
        *reader.feed(fragment(0, function={"arguments": '{"topic":'})),
        *reader.feed(fragment(0, function={"name": "lookup", "arguments": ' "x"}'})),
        *reader.finish(),
    ]

    assert [(e.type, e.data.get("arguments")) for e in events][:2] == [
        ("tool_call_start", None),
        ("tool_call_delta", '{"topic": "x"}'),
    ]
    response = events[-1].data["response"]
    assert response.tool_uses == [ToolUse(id="call_3_0", name="lookup", input={"topic": "x"})]
    assert response.stop_reason == "tool_use"


def test_fragments_whose_id_changes_after_the_first_still_build_one_call():
    """Some servers send a different id on a call's later fragments; only a new name and id start a new call."""
    reader = ChunkReader("local:m", sequence=0)
    list(reader.feed(fragment(0, id="call_first", function={"name": "lookup", "arguments": '{"topic":'})))
    list(reader.feed(fragment(0, id="call_other", function={"arguments": ' "x"}'})))

    response = list(reader.finish())[-1].data["response"]

    assert response.tool_uses == [ToolUse(id="call_first", name="lookup", input={"topic": "x"})]


def test_tool_arguments_that_are_not_an_object_are_malformed():
    reader = ChunkReader("local:m", sequence=0)
    list(reader.feed(fragment(0, id="c", function={"name": "lookup", "arguments": "[1, 2]"})))

    with pytest.raises(MalformedToolCallError, match="list arguments"):
        list(reader.finish())


def test_finish_reason_length_is_max_tokens():
    reader = ChunkReader("local:m", sequence=0)
    list(reader.feed({"choices": [{"index": 0, "delta": {"content": "cut"}, "finish_reason": "length"}]}))

    assert list(reader.finish())[-1].data["stop_reason"] == "max_tokens"


# -- error mapping ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (408, True),
        (409, True),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
    ],
)
def test_status_errors_are_retryable_only_when_repeating_may_succeed(status, retryable):
    error = provider_error(
        ErrorReply(status, '{"error": {"message": "nope", "type": "x", "code": null}}'), endpoint="here"
    )

    assert type(error) is HTTPError
    assert (error.status, error.retryable) == (status, retryable)
    assert str(error).startswith(f"here answered {status} ")


def test_a_body_that_is_not_json_is_kept_bounded_and_quoted_in_the_message():
    error = provider_error(ErrorReply(502, "<html>Bad gateway</html>" + "x" * 10_000), endpoint="here")

    assert "<html>Bad gateway</html>" in str(error)
    assert len(error.body) == MAX_ERROR_BODY_CHARS


def test_a_rate_limit_that_mentions_tokens_is_still_a_rate_limit():
    body = '{"error": {"message": "Request too large: too many tokens per min", "code": "rate_limit_exceeded"}}'

    assert type(provider_error(ErrorReply(429, body), endpoint="here")) is HTTPError


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past: now
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_from_the_headers_openai_and_http_use(headers, seconds):
    from lg_core.providers.openai._errors import retry_after_seconds

    assert retry_after_seconds(headers) == seconds


def test_the_response_body_is_cut_off_as_its_bytes_arrive_not_per_event():
    """One endless SSE line never ends an event: the bound counts bytes as they come, so it stops
    reading after max_response_bytes instead of holding the whole line in memory first."""
    from lg_core.providers._http.provider import _BoundedStream
    from lg_core.providers.openai._connection import OpenAIConnection

    read = []

    def body():
        for _ in range(1000):
            read.append(1)
            yield b"x" * 1024

    settings = OpenAIConnection.parse("remote", {"api_key": "k", "max_response_bytes": 10 * 1024})
    with pytest.raises(ProviderError, match=r"passed max_response_bytes \(10240 bytes\)"):
        for _ in _BoundedStream(body(), settings):
            pass
    assert len(read) == 11
