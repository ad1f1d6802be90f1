"""A local Anthropic Messages server for provider tests: real HTTP on a thread of the test process
(the server is ``sse_server``'s; this module speaks Anthropic's format).

Each request to ``POST /v1/messages`` takes the next queued reply and is
recorded (path, headers, JSON body). Streams are written as Anthropic writes
them: ``Transfer-Encoding: chunked``, each event as ``event: <type>\\ndata:
<compact JSON>\\n\\n`` in its own HTTP chunk, ``ping`` as ``{"type": "ping"}``
(with its space), and nothing after ``message_stop``: the server closes the
body. Errors are ``{"type": "error", "error": {"type", "message"}, "request_id"}``,
as the body of an error status (with a ``request-id`` header) or as an
``event: error`` frame mid-stream.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from tests.providers.sse_server import FakeServer, Framing, Reply, html_reply, json_reply

MESSAGE_ID = "msg_01XFDUDYJgAACzvnptvVoYEL"
MODEL = "claude-sonnet-4-5-20250929"
REQUEST_ID = "req_011CSHoEeqs5C35K2UUqR7Fy"
PING = b'event: ping\ndata: {"type": "ping"}\n\n'

Event = dict[str, Any] | bytes


def encode(event: Event) -> bytes:
    """One event frame; bytes are sent as they are (a malformed frame, a ping)."""
    if isinstance(event, bytes):
        return event
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


def message_start(input_tokens: int = 25, *, cache_read: int = 0, cache_write: int = 0) -> dict[str, Any]:
    usage = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
        "cache_creation": {"ephemeral_5m_input_tokens": cache_write, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 1,
        "service_tier": "standard",
    }
    message: dict[str, Any] = {
        "id": MESSAGE_ID,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return {"type": "message_start", "message": message}


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": fields}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def text_block(index: int, *pieces: str) -> list[Event]:
    return [
        block_start(index, {"type": "text", "text": ""}),
        *(delta(index, type="text_delta", text=piece) for piece in pieces),
        block_stop(index),
    ]


def tool_block(index: int, call_id: str, name: str, fragments: Iterable[str]) -> list[Event]:
    """A ``tool_use`` block: ``input`` starts empty, its JSON comes in ``input_json_delta`` pieces
    (the first one empty, as Anthropic sends it)."""
    return [
        block_start(index, {"type": "tool_use", "id": call_id, "name": name, "input": {}}),
        delta(index, type="input_json_delta", partial_json=""),
        *(delta(index, type="input_json_delta", partial_json=piece) for piece in fragments),
        block_stop(index),
    ]


def thinking_block(index: int, *pieces: str, signature: str) -> list[Event]:
    return [
        block_start(index, {"type": "thinking", "thinking": "", "signature": ""}),
        *(delta(index, type="thinking_delta", thinking=piece) for piece in pieces),
        delta(index, type="signature_delta", signature=signature),
        block_stop(index),
    ]


def redacted_thinking_block(index: int, data: str) -> list[Event]:
    return [block_start(index, {"type": "redacted_thinking", "data": data}), block_stop(index)]


def message_delta(stop_reason: str | None, output_tokens: int, *, stop_sequence: str | None = None) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
        "usage": {"output_tokens": output_tokens},
    }


MESSAGE_STOP: dict[str, Any] = {"type": "message_stop"}
# The replies of a stream (``stream``, ``keep_alive`` with pings, ``stall_headers``, ``drop_after``) take events.
FRAMING = Framing(encode, comment=PING)
stream, keep_alive, stall_headers, drop_after = (
    FRAMING.stream,
    FRAMING.keep_alive,
    FRAMING.stall_headers,
    FRAMING.drop_after,
)


def message(
    blocks: Iterable[Event], *, stop_reason: str | None = "end_turn", usage: tuple[int, int] = (25, 15), **start: Any
) -> list[Event]:
    """A whole streamed message: ``message_start``, a ping, the blocks, ``message_delta``, ``message_stop``."""
    return [message_start(usage[0], **start), PING, *blocks, message_delta(stop_reason, usage[1]), MESSAGE_STOP]


def text_message(*pieces: str, usage: tuple[int, int] = (25, 15)) -> list[Event]:
    return message(text_block(0, *pieces), usage=usage)


def tool_message(
    *calls: tuple[str, str, list[str]], text: str | None = None, usage: tuple[int, int] = (40, 30)
) -> list[Event]:
    """Tool calls ``(id, name, JSON fragments)``, after an optional text block, stopping with ``tool_use``."""
    blocks = text_block(0, text) if text else []
    first = 1 if text else 0
    for offset, (call_id, name, fragments) in enumerate(calls):
        blocks += tool_block(first + offset, call_id, name, fragments)
    return message(blocks, stop_reason="tool_use", usage=usage)


def error_event(kind: str, text: str) -> bytes:
    """An ``event: error`` frame, as Anthropic sends one mid-stream (``overloaded_error``)."""
    return encode({"type": "error", "error": {"type": kind, "message": text}, "request_id": REQUEST_ID})


def error(status: int, kind: str, text: str, *, headers: dict[str, str] | None = None) -> Reply:
    """An Anthropic error response: ``{"type": "error", "error": {"type", "message"}, "request_id"}``."""
    payload = {"type": "error", "error": {"type": kind, "message": text}, "request_id": REQUEST_ID}
    return json_reply(status, payload, headers={"request-id": REQUEST_ID, **(headers or {})})


def serve() -> Iterator[FakeServer]:
    unqueued = lambda: error(500, "api_error", "the test queued no reply for this request")  # noqa: E731
    yield from FakeServer(base_path="", unqueued=unqueued, name="fake-anthropic").serve()


__all__ = [
    "MESSAGE_ID",
    "MESSAGE_STOP",
    "MODEL",
    "PING",
    "REQUEST_ID",
    "block_start",
    "block_stop",
    "delta",
    "drop_after",
    "encode",
    "error",
    "error_event",
    "html_reply",
    "json_reply",
    "keep_alive",
    "message",
    "message_delta",
    "message_start",
    "redacted_thinking_block",
    "serve",
    "stall_headers",
    "stream",
    "text_block",
    "text_message",
    "thinking_block",
    "tool_block",
    "tool_message",
]
