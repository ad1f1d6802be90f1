"""A local Gemini API server for provider tests: real HTTP on a thread of the test process
(the server is ``sse_server``'s; this module speaks Google's format).

Each request to ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` takes the
next queued reply and is recorded (path with its query, headers, JSON body). Streams are
written as Google writes them: ``Transfer-Encoding: chunked``, each chunk a whole
``GenerateContentResponse`` as ``data: <JSON>`` ended by CRLF CRLF, in its own HTTP chunk,
with no event name and no end marker (the server closes the body after the chunk with
the ``finishReason``). Google's JSON puts a space after each colon and none after a
comma (``{"candidates": [{"content": {"parts": [{"text": "Hi"}],"role": "model"}``), and
every chunk repeats ``usageMetadata`` (the counts so far), ``modelVersion`` and
``responseId``. Errors are ``{"error": {"code", "message", "status", "details"}}``, as the
body of an error status or as a chunk mid-stream.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.providers.sse_server import (
    FakeServer,
    Framing,
    Reply,
    body_reply,
    html_reply,
    json_reply,
)

MODEL_VERSION = "gemini-2.5-flash"
RESPONSE_ID = "WEXbaMnpF7iPjMcP27mckQE"
SIGNATURE = "EugDCuUDAQw51scLDR00xq3c5Jr0jq+uquWFjdKd8NzsiMjdTnqUMs5soDWDt3A7uXavJRm54b0raEyK"

Chunk = dict[str, Any] | bytes


def encode(chunk: Chunk) -> bytes:
    """One SSE frame; bytes are sent as they are (a malformed frame)."""
    if isinstance(chunk, bytes):
        return chunk
    return b"data: " + json.dumps(chunk, separators=(",", ": "), ensure_ascii=False).encode() + b"\r\n\r\n"


# The replies of a stream (``stream``, ``keep_alive``, ``stall_headers``, ``drop_after``) take chunks. Google
# sends no keep-alive comments, but a proxy in front of it may.
FRAMING = Framing(encode, comment=b": keep-alive\r\n\r\n")
stream, keep_alive, stall_headers, drop_after = (
    FRAMING.stream,
    FRAMING.keep_alive,
    FRAMING.stall_headers,
    FRAMING.drop_after,
)


def usage(prompt: int = 12, output: int | None = None, *, thoughts: int = 0, cached: int = 0) -> dict[str, Any]:
    """``usageMetadata`` as Google writes it: ``candidatesTokenCount`` only once output began."""
    data: dict[str, Any] = {"promptTokenCount": prompt}
    if output is not None:
        data["candidatesTokenCount"] = output
    data["totalTokenCount"] = prompt + (output or 0) + thoughts
    if cached:
        data["cachedContentTokenCount"] = cached
    data["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
    if cached:
        data["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
    if thoughts:
        data["thoughtsTokenCount"] = thoughts
    return data


def chunk(
    *parts: dict[str, Any],
    finish: str | None = None,
    counts: dict[str, Any] | None = None,
    finish_message: str | None = None,
) -> dict[str, Any]:
    """One streamed GenerateContentResponse with the candidate's ``parts``."""
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}}
    if finish:
        candidate["finishReason"] = finish
    candidate["index"] = 0
    if finish_message:
        candidate["finishMessage"] = finish_message
    return {
        "candidates": [candidate],
        "usageMetadata": counts or usage(),
        "modelVersion": MODEL_VERSION,
        "responseId": RESPONSE_ID,
    }


def text(value: str, *, signature: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"text": value}
    if signature:
        part["thoughtSignature"] = signature
    return part


def thought(value: str) -> dict[str, Any]:
    return {"text": value, "thought": True}


def call(
    name: str, args: dict[str, Any] | None = None, *, call_id: str | None = None, signature: str | None = None
) -> dict[str, Any]:
    """A ``functionCall`` part; Gemini 3.5 adds an ``id``, earlier models none."""
    body: dict[str, Any] = {"name": name}
    if args is not None:
        body["args"] = args
    if call_id:
        body["id"] = call_id
    part: dict[str, Any] = {"functionCall": body}
    if signature:
        part["thoughtSignature"] = signature
    return part


def text_answer(*pieces: str, prompt: int = 12, output: int = 9, finish: str = "STOP") -> list[Chunk]:
    """A streamed text answer: one piece per chunk, the counts growing, the last chunk finishing."""
    chunks: list[Chunk] = []
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        grown = output if last else max(1, output * (index + 1) // len(pieces))
        chunks.append(chunk(text(piece), finish=finish if last else None, counts=usage(prompt, grown)))
    return chunks


def calls_answer(*parts: dict[str, Any], prompt: int = 40, output: int = 20, thoughts: int = 0) -> list[Chunk]:
    """Function calls (and any parts before them) in one chunk, as Gemini sends them, finishing with STOP."""
    return [chunk(*parts, finish="STOP", counts=usage(prompt, output, thoughts=thoughts))]


def error_body(code: int, status: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = details
    return {"error": error}


def retry_info(delay: str) -> dict[str, Any]:
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}


def error_info(reason: str) -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "googleapis.com",
        "metadata": {"service": "generativelanguage.googleapis.com"},
    }


def error(
    code: int,
    status: str,
    message: str,
    *,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """A Google error response, pretty-printed as Google sends it."""
    body = json.dumps(error_body(code, status, message, details), indent=2).encode()
    return body_reply(code, body, content_type="application/json; charset=UTF-8", headers=headers)


def serve() -> Iterator[FakeServer]:
    unqueued = lambda: error(500, "INTERNAL", "the test queued no reply for this request")  # noqa: E731
    yield from FakeServer(base_path="", unqueued=unqueued, name="fake-gemini").serve()


__all__ = [
    "MODEL_VERSION",
    "RESPONSE_ID",
    "SIGNATURE",
    "call",
    "calls_answer",
    "chunk",
    "drop_after",
    "encode",
    "error",
    "error_body",
    "error_info",
    "html_reply",
    "json_reply",
    "keep_alive",
    "retry_info",
    "serve",
    "stall_headers",
    "stream",
    "text",
    "text_answer",
    "thought",
    "usage",
]
