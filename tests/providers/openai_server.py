"""A local OpenAI-compatible server for provider tests: real HTTP on a thread of the test process
(the server is ``sse_server``'s; this module speaks OpenAI's format).

Each request to ``POST /v1/chat/completions`` takes the next queued reply and
is recorded (path, headers, JSON body). Streams are written as OpenAI writes
them: ``Transfer-Encoding: chunked``, one ``data: {json}\\n\\n`` event per
HTTP chunk, ``data: [DONE]\\n\\n`` last. The chunk builders follow the
documented ``chat.completion.chunk`` shape, ``"usage": null`` on every chunk
but the final usage chunk (``stream_options.include_usage``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.providers.sse_server import FakeServer, Framing, Reply, json_reply

CHUNK_BASE = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion.chunk",
    "created": 1741570283,
    "model": "gpt-4o-mini-2024-07-18",
    "service_tier": "default",
    "system_fingerprint": "fp_06737a9306",
}


def sse(event: dict[str, Any] | str | bytes) -> bytes:
    """One ``data:`` event; bytes are sent as they are (a named event such as DashScope's ``event: error``)."""
    if isinstance(event, bytes):
        return event
    data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


# The replies of a stream (``stream``, ``keep_alive``, ``stall_headers``, ``drop_after``) take events; a complete
# stream ends with ``[DONE]``. Keep-alive comments are OpenRouter's ``: OPENROUTER PROCESSING``, sent while a
# model is queued.
FRAMING = Framing(sse, comment=b": OPENROUTER PROCESSING\n\n", closing=(sse("[DONE]"),))
stream, keep_alive, stall_headers, drop_after = (
    FRAMING.stream,
    FRAMING.keep_alive,
    FRAMING.stall_headers,
    FRAMING.drop_after,
)


def chunk(delta: dict[str, Any] | None = None, finish_reason: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}
    return {**CHUNK_BASE, "choices": [choice], "usage": None}


def usage_chunk(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    return {**CHUNK_BASE, "choices": [], "usage": usage}


def text_chunks(*pieces: str, usage: tuple[int, int] = (12, 5)) -> list[dict[str, Any]]:
    """A streamed text answer: the role chunk, one chunk per piece, ``stop``, the usage chunk."""
    return [
        chunk({"role": "assistant", "content": "", "refusal": None}),
        *(chunk({"content": piece}) for piece in pieces),
        chunk({}, "stop"),
        usage_chunk(*usage),
    ]


def tool_call_chunks(*calls: tuple[str, str, list[str]], usage: tuple[int, int] = (30, 20)) -> list[dict[str, Any]]:
    """Tool calls ``(id, name, argument fragments)``: each call's first chunk has its id and name, later ones
    carry pieces of its arguments, all keyed by the call's index."""
    chunks = [chunk({"role": "assistant", "content": None, "refusal": None})]
    for index, (call_id, name, fragments) in enumerate(calls):
        first = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        chunks.append(chunk({"tool_calls": [first]}))
        chunks.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}) for piece in fragments
        )
    return [*chunks, chunk({}, "tool_calls"), usage_chunk(*usage)]


def error(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """An OpenAI error response: ``{"error": {"message", "type", "param", "code"}}``."""
    return json_reply(
        status, {"error": {"message": message, "type": type, "param": None, "code": code}}, headers=headers
    )


def serve() -> Iterator[FakeServer]:
    unqueued = lambda: error(500, "the test queued no reply for this request", type="server_error")  # noqa: E731
    yield from FakeServer(base_path="/v1", unqueued=unqueued, name="fake-openai").serve()
