"""The anthropic adapter's own format and options, against a local server speaking Anthropic's
streaming format over real HTTP.

What every HTTP adapter must do (retries, errors, malformed streams, cancellation,
deadlines, credentials, the shared options) is checked for this one too by the
conformance suite, ``test_http_conformance``; this module checks what is the
Messages API's: the request body and headers, thinking, tool results, images,
structured output, ``api_version``. Every test runs whole agent runs through the
engine, so what is checked is what a user sees and what the server received.
"""

from __future__ import annotations

import json
import threading

import pytest

from lg_core import ConfigurationError, ProtocolError
from lg_core.content import Image, Reasoning, Text
from lg_core.messages import Message
from tests.providers.agents import (
    LOOKUP_SCHEMA,
    PNG,
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
from tests.providers.anthropic_server import (
    MESSAGE_STOP,
    PING,
    delta,
    encode,
    error,
    message,
    message_delta,
    message_start,
    serve,
    stream,
    text_block,
    text_message,
    thinking_block,
    tool_block,
    tool_message,
)
from tests.providers.sse_server import frames

KEY = "sk-ant-api03-Zq7t0psecret"


@pytest.fixture
def server():
    yield from serve()


def connect(server=None, **options):
    """The ``anthropic`` connection, every agent's model (``anthropic:claude-sonnet-4-5``), to ``server``."""
    use_connection("anthropic:claude-sonnet-4-5", {"adapter": "anthropic", "api_key": KEY, **options}, server)


@pytest.fixture
def connection(config, server):
    connect(server, headers={"anthropic-beta": "fine-grained-tool-streaming-2025-05-14"})
    return server


# -- requests and answers ------------------------------------------------------------------------------


def test_a_run_sends_a_messages_request_with_the_key_the_version_and_the_settings(connection):
    connection.reply(stream(text_message("Refunds take ", "30 days.")))

    run = SupportAgent.ask("How long do refunds take?", settings={"temperature": 0.2, "max_tokens": 200})

    assert run.outcome == "completed", run.error
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


def test_cache_reads_and_writes_are_reported_apart_from_uncached_input(connection):
    connection.reply(stream(message(text_block(0, "ok"), usage=(12, 9), cache_read=3000, cache_write=512)))

    usage = SupportAgent.ask("Hi").usage

    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens) == (
        12,
        3000,
        512,
        9,
    )
    assert usage.total_tokens == 12 + 3000 + 512 + 9


def test_thinking_streams_as_reasoning_and_goes_back_signed_with_the_tool_result(connection):
    """With extended thinking and tools, Anthropic requires the turn's thinking block, signature
    and all, in the assistant message that the tool results answer."""
    thinking = thinking_block(0, "The user asks about ", "refunds; look it up.", signature="EqQBCgIYAhIMsig")
    connection.reply(
        stream(
            message(
                [*thinking, *tool_block(1, "toolu_01A", "lookup", ['{"topic": "refunds"}'])], stop_reason="tool_use"
            )
        ),
        stream(text_message("Refunds take 30 days.")),
    )
    settings = {"max_tokens": 16000, "thinking": {"type": "enabled", "budget_tokens": 10000}}

    run = ToolAgent.stream_ask("Can I get a refund?", settings=settings)
    events = list(run)

    assert run.outcome == "completed", run.error
    assert [e.data["text"] for e in events if e.type == "reasoning_delta"] == [
        "The user asks about ",
        "refunds; look it up.",
    ]
    first, second = connection.received
    assert first.body["thinking"] == {"type": "enabled", "budget_tokens": 10000}
    assistant = second.body["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            {
                "type": "thinking",
                "thinking": "The user asks about refunds; look it up.",
                "signature": "EqQBCgIYAhIMsig",
            },
            {"type": "tool_use", "id": "toolu_01A", "name": "lookup", "input": {"topic": "refunds"}},
        ],
    }
    stored = run.result.messages[1].content[0]
    assert stored == Reasoning(text="The user asks about refunds; look it up.", signature="EqQBCgIYAhIMsig")


@pytest.mark.timeout(60)
def test_message_stop_ends_the_answer_while_the_server_holds_the_connection_open(config, server):
    """A proxy may keep the body open after ``message_stop`` (here: until a late ping): the answer is
    complete at ``message_stop``, so waiting for the body to close would stall each turn and, past the
    read timeout, throw the finished answer away as a timeout and ask again."""
    connect(server, timeout=3)
    released = threading.Event()
    answer = [encode(event) for event in text_message("All ", "done.")]
    server.reply(frames([*answer, PING], hold=released, hold_after=len(answer)))

    try:
        run = SupportAgent.ask("Hi")
    finally:
        released.set()

    assert run.outcome == "completed", run.error
    assert run.response == "All done."
    assert (run.usage.input_tokens, run.usage.output_tokens) == (25, 15)
    assert retries(run) == [] and len(server.received) == 1


# -- tools -------------------------------------------------------------------------------------------


def test_a_tool_call_streams_its_input_in_pieces_and_its_result_goes_back_as_a_tool_result_block(connection):
    connection.reply(
        stream(tool_message(lookup_call("toolu_01Abc", "refunds", split_at=5), text="Let me check.")),
        stream(text_message("Refunds: entry for refunds.")),
    )

    run = ToolAgent.stream_ask("Can I get a refund?")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds: entry for refunds."
    call_events = [(e.type, dict(e.data)) for e in events if e.data.get("id") == "toolu_01Abc"]
    assert [kind for kind, _ in call_events][:3] == ["tool_call_start", "tool_call_delta", "tool_call_delta"]
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
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01Abc",
                    "content": [{"type": "text", "text": "entry for refunds"}],
                }
            ],
        },
    ]
    assert run.usage.input_tokens == 40 + 25


def test_parallel_tool_calls_are_answered_in_one_user_message_and_an_error_says_so(connection):
    connection.reply(
        stream(tool_message(lookup_call("toolu_1", "refunds"), lookup_call("toolu_2", "secrets"))),
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
    assert {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}} in result[
        "content"
    ]


def test_a_tool_call_without_input_deltas_uses_the_input_it_started_with(connection):
    """A call to a tool without parameters may come with no ``input_json_delta`` at all."""
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "toolu_e", "name": "screenshot", "input": {}},
    }
    connection.reply(
        stream(message([start, {"type": "content_block_stop", "index": 0}], stop_reason="tool_use")),
        stream(text_message("Done.")),
    )

    run = ScreenshotAgent.ask("Screenshot please.")

    assert run.outcome == "completed", run.error
    assert connection.received[1].body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_e", "name": "screenshot", "input": {}}
    ]


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
    question = Message(
        role="user", content=[Text(text="What is this?"), Image(data=b"BM", media_type="image/bmp", name="scan.bmp")]
    )

    run = SupportAgent.ask(question)

    assert run.outcome == "failed"
    assert "image 'scan.bmp' of type 'image/bmp'" in str(run.error)
    assert "image/png" in str(run.error)
    assert connection.received == []


# -- structured results ------------------------------------------------------------------------------


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
    connect(server, capabilities={"native_structured_output": True})
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
    """529 is Anthropic's own status for an overloaded API (no HTTP registry has it)."""
    connection.reply(error(529, "overloaded_error", "Overloaded"), stream(text_message("Done.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Done."
    assert len(connection.received) == 2
    [retry] = retries(run)
    assert retry.data["error_class"] == "HTTPError"
    assert "529 Overloaded: Overloaded (overloaded_error)" in retry_reasons(run)[0]


# -- malformed streams ----------------------------------------------------------------------------------


def test_a_delta_for_a_block_that_never_started_is_a_protocol_error(connection):
    connection.reply(
        stream([message_start(), delta(3, type="text_delta", text="stray"), message_delta("end_turn", 1), MESSAGE_STOP])
    )

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ProtocolError
    assert "content block 3, which it never started" in str(run.error)


# -- connection options -------------------------------------------------------------------------------


def test_api_version_is_sent_as_the_anthropic_version_header(config, server):
    connect(server, api_version="2023-01-01")
    server.reply(stream(text_message("ok")))

    assert SupportAgent.ask("Hi").response == "ok"
    assert server.received[0].headers["anthropic-version"] == "2023-01-01"


def test_an_empty_api_version_is_a_configuration_error(config):
    connect(api_version="")

    with pytest.raises(ConfigurationError, match="api_version must be a non-empty string"):
        SupportAgent.ask("Hi")
