"""Ending the waits of a cancelled or overdue run promptly, whatever the endpoint is doing.

A run's worker can block in two places: waiting for the response headers (an
overloaded endpoint may take minutes to send them) and waiting for the next
chunk of the body (a stalled stream, or one kept alive by comments). Checking
the cancellation token between chunks reaches neither, and the read timeout
(120 s by default) is far too long to hold a cancelled run's worker.

* The body: :func:`abort_when_interrupted` shuts the response's socket down
  (httpx's public ``network_stream`` extension) when the run is cancelled or
  its deadline passes, which ends the blocked read at once.
* The headers: :class:`PendingResponse` sends the request on a helper thread
  and the worker waits for the headers, the cancellation or the deadline,
  whichever comes first. On cancellation the request is abandoned: its socket
  is shut down if the connection was opened for it (httpx's ``trace``
  extension reports the network stream as soon as it exists), and a response
  that arrives later is closed unread. Either way httpcore discards the
  connection instead of returning it to the pool. A kept-alive connection
  reused for the request is not reported by ``trace``: its helper thread then
  waits until the headers or the (deadline-bounded) read timeout, but the
  run's worker does not.
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from lg_core.errors import DeadlineExceededError
from lg_core.models.request import ModelRequest

# The trace events whose return value is the stream of a connection opened for the request.
_NEW_STREAM_EVENTS = frozenset(
    {
        "connection.connect_tcp.complete",
        "connection.connect_unix_socket.complete",
        "connection.start_tls.complete",
    }
)


def check_interrupt(request: ModelRequest) -> None:
    """Stop between chunks when the run is cancelled or past its deadline."""
    request.cancellation_token.raise_if_cancelled()
    if request.deadline is not None and time.time() >= request.deadline.timestamp():
        raise DeadlineExceededError()


class PendingResponse:
    """One request sent on a helper thread until its response headers arrive (see the module docstring)."""

    def __init__(self, client: httpx.Client, http_request: httpx.Request) -> None:
        self._arrived = threading.Event()  # the helper is done, or the run was cancelled
        self._lock = threading.Lock()
        self._abandoned = False
        self._stream: Any = None  # the network stream of a connection opened for this request
        self._response: httpx.Response | None = None
        self._error: BaseException | None = None
        http_request.extensions["trace"] = self._trace
        # In a copy of the caller's context, so context-bound instrumentation (tracing, logging) still sees the run.
        send = contextvars.copy_context().run
        threading.Thread(
            target=send, args=(self._send, client, http_request), name="provider-headers", daemon=True
        ).start()

    def wait(self, request: ModelRequest) -> httpx.Response:
        """The response once its headers arrive; CancelledError or DeadlineExceededError as soon as
        the run is cancelled or overdue; the request's own httpx error if it failed."""
        forget = request.cancellation_token.on_cancel(self._arrived.set)
        try:
            self._arrived.wait(_seconds_left(request))
        finally:  # also when the wait itself is interrupted (KeyboardInterrupt): nobody will read a later response
            forget()
            self._settle()
        if self._abandoned:
            request.cancellation_token.raise_if_cancelled()
            raise DeadlineExceededError()
        if self._error is not None:
            raise self._error
        assert self._response is not None
        return self._response

    def _settle(self) -> None:
        """Abandon the request unless its outcome is in; an abandoned request's new connection is shut."""
        with self._lock:
            self._abandoned = self._response is None and self._error is None
            stream = self._stream
        if self._abandoned:
            shutdown(stream)

    def _send(self, client: httpx.Client, http_request: httpx.Request) -> None:
        response, error = None, None
        try:
            response = client.send(http_request, stream=True)
        except BaseException as exc:  # handed to the worker, which re-raises it
            error = exc
        with self._lock:
            abandoned = self._abandoned
            if not abandoned:
                self._response, self._error = response, error
        if abandoned and response is not None:
            response.close()  # unread, so the connection is closed rather than pooled
        self._arrived.set()

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        """httpx's ``trace`` hook: keep the stream of a new connection, so a cancel can shut it down."""
        if event not in _NEW_STREAM_EVENTS:
            return
        with self._lock:
            self._stream = info.get("return_value")
            abandoned = self._abandoned
        if abandoned:  # cancelled while connecting: the request must not go out
            shutdown(self._stream)


def abort_when_interrupted(request: ModelRequest, response: httpx.Response) -> Callable[[], None]:
    """Abort ``response`` when the run is cancelled or its deadline passes; returns the disarmer.

    The deadline needs its own timer: keep-alive comments (OpenRouter's ``: OPENROUTER
    PROCESSING``) reset the read timeout and yield no event to check it between.
    """
    stream = response.extensions.get("network_stream")
    forget = request.cancellation_token.on_cancel(lambda: shutdown(stream))
    if request.deadline is None:
        return forget
    timer = threading.Timer(_seconds_left(request) or 0.0, shutdown, (stream,))
    timer.daemon = True
    timer.start()

    def disarm() -> None:
        forget()
        timer.cancel()

    return disarm


def shutdown(stream: Any) -> None:
    """Unblock a read waiting on ``stream`` (an httpcore network stream, or None).

    Shutting the socket down ends a read blocked in another thread at once (closing
    it would not); httpcore then sees a broken connection and never reuses it.
    """
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _seconds_left(request: ModelRequest) -> float | None:
    """Seconds until the run's deadline (never negative); None without one."""
    if request.deadline is None:
        return None
    return max(request.deadline.timestamp() - time.time(), 0.0)


__all__ = ["PendingResponse", "abort_when_interrupted", "check_interrupt", "shutdown"]
