"""A local OpenAI-compatible server for provider tests: real HTTP on a thread of the test process.

Each request to ``POST /v1/chat/completions`` takes the next queued reply and
is recorded (path, headers, JSON body). Streams are written as OpenAI writes
them: ``Transfer-Encoding: chunked``, one ``data: {json}\\n\\n`` event per
HTTP chunk, ``data: [DONE]\\n\\n`` last. The chunk builders follow the
documented ``chat.completion.chunk`` shape, ``"usage": null`` on every chunk
but the final usage chunk (``stream_options.include_usage``).
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHUNK_BASE = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion.chunk",
    "created": 1741570283,
    "model": "gpt-4o-mini-2024-07-18",
    "service_tier": "default",
    "system_fingerprint": "fp_06737a9306",
}


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
        chunks.extend(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}) for piece in fragments)
    return [*chunks, chunk({}, "tool_calls"), usage_chunk(*usage)]


def sse(event: dict[str, Any] | str | bytes) -> bytes:
    """One ``data:`` event; bytes are sent as they are (a named event such as DashScope's ``event: error``)."""
    if isinstance(event, bytes):
        return event
    data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = 0.0  # time.monotonic() when the request arrived
    port: int = 0  # the client's port: requests on one kept-alive connection share it


Reply = Callable[["_Handler"], None]


def stream(events: Iterable[dict[str, Any] | str | bytes], *, done: bool = True, hold: threading.Event | None = None, hold_after: int = 1) -> Reply:
    """A 200 event stream; with ``hold``, it waits for the event after ``hold_after`` events."""

    def reply(handler: _Handler) -> None:
        handler.start_stream()
        for index, event in enumerate(events):
            if hold is not None and index == hold_after:
                hold.wait(120)  # longer than any test timeout: a test that stalls fails, it does not pass late
            handler.write_chunk(sse(event))
        if done:
            handler.write_chunk(sse("[DONE]"))
        handler.end_chunks()

    return reply


def stall_headers(
    events: Iterable[dict[str, Any] | str], *, arrived: threading.Event, until: threading.Event, left: threading.Event | None = None
) -> Reply:
    """An overloaded server: it takes the request (``arrived`` is set), then sends not even the response
    headers until ``until`` is set; then the stream. If the client closes the connection first, ``left``
    is set and nothing is sent."""

    def reply(handler: _Handler) -> None:
        arrived.set()
        for _ in range(2400):  # two minutes at most: longer than any test timeout
            if until.wait(0.05):
                break
            if _client_left(handler.connection):
                if left is not None:
                    left.set()
                return
        with contextlib.suppress(OSError):  # the client may have given up meanwhile
            stream(events)(handler)

    return reply


def _client_left(connection: socket.socket) -> bool:
    """Whether the client closed its end (the request body was read, so anything readable is the end)."""
    readable, _, _ = select.select([connection], [], [], 0)
    try:
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def keep_alive(events: Iterable[dict[str, Any] | str], *, until: threading.Event, after: int = 1) -> Reply:
    """A stream that, after ``after`` events, sends only SSE comments (OpenRouter's ``: OPENROUTER PROCESSING``
    while a model is queued) until ``until`` is set, then the rest."""

    def reply(handler: _Handler) -> None:
        handler.start_stream()
        pending = list(events)
        for event in pending[:after]:
            handler.write_chunk(sse(event))
        for _ in range(2400):  # two minutes at most: longer than any test timeout
            if until.wait(0.05):
                break
            handler.write_chunk(b": OPENROUTER PROCESSING\n\n")
        for event in pending[after:]:
            handler.write_chunk(sse(event))
        handler.write_chunk(sse("[DONE]"))
        handler.end_chunks()

    return reply


def drop_after(events: Iterable[dict[str, Any]]) -> Reply:
    """A stream cut off mid-body: some events, then the socket closes without the last HTTP chunk."""

    def reply(handler: _Handler) -> None:
        handler.start_stream()
        for event in events:
            handler.write_chunk(sse(event))
        handler.drop()

    return reply


def error(
    status: int, message: str, *, type: str = "invalid_request_error", code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """An OpenAI error response: ``{"error": {"message", "type", "param", "code"}}``."""
    return json_reply(status, {"error": {"message": message, "type": type, "param": None, "code": code}}, headers=headers)


def json_reply(status: int, payload: Any, *, headers: dict[str, str] | None = None) -> Reply:
    """A plain JSON response with ``status`` (and extra ``headers``, e.g. Retry-After)."""

    def reply(handler: _Handler) -> None:
        body = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    return reply


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"null")
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.owner.received.append(Received(self.path, headers, body, time.monotonic(), self.client_address[1]))
        try:
            self.server.owner.next_reply()(self)
        except (BrokenPipeError, ConnectionResetError):  # the client went away (a cancelled run)
            self.close_connection = True

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def drop(self) -> None:
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeOpenAI


class FakeOpenAI:
    """Serves queued replies in order and records what it received."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._replies: list[Reply] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-openai", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def reply(self, *replies: Reply) -> FakeOpenAI:
        with self._lock:
            self._replies.extend(replies)
        return self

    def next_reply(self) -> Reply:
        with self._lock:
            if not self._replies:
                return error(500, "the test queued no reply for this request", type="server_error")
            return self._replies.pop(0)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server
