"""A local HTTP server for provider tests: real HTTP on a thread of the test process.

Each POST takes the next queued reply and is recorded (path, headers, JSON
body). A reply writes what the provider would: a stream is sent with
``Transfer-Encoding: chunked``, one already-encoded Server-Sent Events frame per
HTTP chunk, as the providers' servers send them. The frame format is the
provider's own, so each provider's module (``openai_server``,
``anthropic_server``) encodes its events and uses the replies here, through a
:class:`Framing` that knows how it encodes one event.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = 0.0  # time.monotonic() when the request arrived
    port: int = 0  # the client's port: requests on one kept-alive connection share it


Reply = Callable[["_Handler"], None]


def frames(encoded: Iterable[bytes], *, hold: threading.Event | None = None, hold_after: int = 1) -> Reply:
    """A 200 event stream of ``encoded`` frames; with ``hold``, it waits for the frame after ``hold_after`` frames."""

    def reply(handler: _Handler) -> None:
        handler.start_stream()
        for index, frame in enumerate(encoded):
            if hold is not None and index == hold_after:
                hold.wait(120)  # longer than any test timeout: a test that stalls fails, it does not pass late
            handler.write_chunk(frame)
        handler.end_chunks()

    return reply


def stall_headers(
    reply: Reply, *, arrived: threading.Event, until: threading.Event, left: threading.Event | None = None
) -> Reply:
    """An overloaded server: it takes the request (``arrived`` is set), then sends not even the response
    headers until ``until`` is set; then ``reply``. If the client closes the connection first, ``left``
    is set and nothing is sent."""

    def stalled(handler: _Handler) -> None:
        arrived.set()
        for _ in range(2400):  # two minutes at most: longer than any test timeout
            if until.wait(0.05):
                break
            if _client_left(handler.connection):
                if left is not None:
                    left.set()
                return
        with contextlib.suppress(OSError):  # the client may have given up meanwhile
            reply(handler)

    return stalled


def _client_left(connection: socket.socket) -> bool:
    """Whether the client closed its end (the request body was read, so anything readable is the end)."""
    readable, _, _ = select.select([connection], [], [], 0)
    try:
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def keep_alive(encoded: Iterable[bytes], *, until: threading.Event, comment: bytes, after: int = 1) -> Reply:
    """A stream that, after ``after`` frames, sends only ``comment`` (an SSE comment, or a ping event)
    every 50 ms until ``until`` is set, then the rest."""

    def reply(handler: _Handler) -> None:
        handler.start_stream()
        pending = list(encoded)
        for frame in pending[:after]:
            handler.write_chunk(frame)
        for _ in range(2400):  # two minutes at most: longer than any test timeout
            if until.wait(0.05):
                break
            handler.write_chunk(comment)
        for frame in pending[after:]:
            handler.write_chunk(frame)
        handler.end_chunks()

    return reply


def drop_after(encoded: Iterable[bytes]) -> Reply:
    """A stream cut off mid-body: some frames, then the socket closes without the last HTTP chunk."""

    def reply(handler: _Handler) -> None:
        handler.start_stream()
        for frame in encoded:
            handler.write_chunk(frame)
        handler.drop()

    return reply


def json_reply(status: int, payload: Any, *, headers: dict[str, str] | None = None) -> Reply:
    """A plain JSON response with ``status`` (and extra ``headers``, e.g. Retry-After)."""
    return body_reply(status, json.dumps(payload).encode(), content_type="application/json", headers=headers)


def body_reply(status: int, body: bytes, *, content_type: str, headers: dict[str, str] | None = None) -> Reply:
    """A response with ``status`` and a whole ``body`` (JSON, or a proxy's HTML page)."""

    def reply(handler: _Handler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    return reply


def html_reply(status: int, page: str) -> Reply:
    """A proxy's error page in place of the provider's answer."""
    return body_reply(status, page.encode(), content_type="text/html")


@dataclass(frozen=True)
class Framing:
    """A provider's event framing: ``encode`` writes one event as its SSE frame (bytes are sent as they are,
    for a malformed frame), ``closing`` ends a complete stream (OpenAI's ``[DONE]``), and ``comment`` is what
    the server sends while it keeps a stream alive (an SSE comment, or Anthropic's ping).

    Its replies take the provider's events and encode them, so a test speaks only the provider's format.
    """

    encode: Callable[[Any], bytes]
    comment: bytes
    closing: tuple[bytes, ...] = field(default=())

    def encoded(self, events: Iterable[Any], *, complete: bool = True) -> list[bytes]:
        """``events`` encoded, with the closing frames when the stream is ``complete``."""
        return [*(self.encode(event) for event in events), *(self.closing if complete else ())]

    def stream(
        self, events: Iterable[Any], *, complete: bool = True, hold: threading.Event | None = None, hold_after: int = 1
    ) -> Reply:
        """A 200 event stream (see :meth:`encoded`); ``complete=False`` leaves out the closing frames, as a server
        that closed the body early would."""
        return frames(self.encoded(events, complete=complete), hold=hold, hold_after=hold_after)

    def keep_alive(self, events: Iterable[Any], *, until: threading.Event, after: int = 1) -> Reply:
        """A stream that, after ``after`` events, sends only ``comment`` until ``until`` is set, then the rest."""
        return keep_alive(self.encoded(events), until=until, comment=self.comment, after=after)

    def stall_headers(
        self,
        events: Iterable[Any],
        *,
        arrived: threading.Event,
        until: threading.Event,
        left: threading.Event | None = None,
    ) -> Reply:
        """An overloaded server that sends not even the response headers until ``until`` is set
        (see :func:`stall_headers`)."""
        return stall_headers(self.stream(events), arrived=arrived, until=until, left=left)

    def drop_after(self, events: Iterable[Any]) -> Reply:
        """A stream cut off mid-body: ``events``, then the socket closes without the last HTTP chunk."""
        return drop_after(self.encoded(events, complete=False))

    def body(self, events: Iterable[Any]) -> bytes:
        """The whole body of a complete stream, for an ``httpx.MockTransport``."""
        return b"".join(self.encoded(events))


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
    owner: FakeServer


class FakeServer:
    """Serves queued replies in order and records what it received.

    ``base_path`` is the part of the base URL a connection names (``/v1`` for
    OpenAI's; Anthropic's base URL has none, its path is ``/v1/messages``);
    ``unqueued`` answers a request the test queued no reply for.
    """

    def __init__(self, *, base_path: str, unqueued: Callable[[], Reply], name: str) -> None:
        self.received: list[Received] = []
        self._base_path = base_path
        self._unqueued = unqueued
        self._replies: list[Reply] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name=name, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # a TCP server's address, never a Unix socket's bytes
        return f"http://{host}:{port}{self._base_path}"

    def reply(self, *replies: Reply) -> FakeServer:
        with self._lock:
            self._replies.extend(replies)
        return self

    def next_reply(self) -> Reply:
        with self._lock:
            if not self._replies:
                return self._unqueued()
            return self._replies.pop(0)

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def serve(self) -> Iterator[FakeServer]:
        """For a fixture: ``yield from FakeServer(...).serve()``."""
        with self:
            yield self
