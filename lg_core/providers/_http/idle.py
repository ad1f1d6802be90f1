"""Giving up a stream that sends no data for the connection's ``timeout``, however alive it is kept.

httpx's read timeout starts again with every chunk, and a keep-alive is a
chunk: an SSE comment (``: keep-alive``, OpenRouter's ``: OPENROUTER
PROCESSING``) or, for Anthropic, a ``ping`` event. An endpoint that sends only
those would hold the run's worker for as long as it likes when the run has no
deadline. :class:`IdleWatch` adds up the time spent waiting for the body since
the last event that carried data, and ends the stream with a retryable
HTTPError once that reaches ``timeout``: the same wait the read timeout allows
an endpoint that sends nothing at all.

Only waiting for the server counts: the time the reader and the run spend on
an event between two reads (publishing it, a slow event consumer) does not, so
a busy worker never mistakes its own work for a silent server. The wait is
checked as each chunk arrives; a server that stops sending even keep-alives
meets httpx's read timeout instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import httpx_sse

from lg_core.errors import HTTPError


class IdleWatch:
    """The waiting time of one response since its last data event (see the module docstring)."""

    def __init__(self, seconds: float, endpoint: str, keep_alive_events: frozenset[str] = frozenset()) -> None:
        self.seconds = seconds
        self.endpoint = endpoint
        self.keep_alive_events = keep_alive_events  # event names that are keep-alives (Anthropic's "ping")
        self.waited = 0.0

    def body(self, stream: Any) -> httpx.SyncByteStream:
        """``stream`` (a response's byte stream), timed while it is waited for."""
        return _WatchedBody(stream, self)

    def events(self, events: Iterable[httpx_sse.ServerSentEvent]) -> Iterator[httpx_sse.ServerSentEvent]:
        """``events``; each one that carries data starts the count again."""
        for sse in events:
            if sse.data.strip() and sse.event not in self.keep_alive_events:
                self.waited = 0.0
            yield sse

    def add_wait(self, seconds: float) -> None:
        """Count ``seconds`` spent waiting for a chunk; the idle-timeout error once the total reaches the limit."""
        self.waited += seconds
        if self.waited >= self.seconds:
            raise HTTPError(
                f"{self.endpoint} sent no data for {self.seconds:g} s (the connection's timeout), only keep-alives; "
                "the stream was given up",
                retryable=True,
            )


class _WatchedBody(httpx.SyncByteStream):
    """A response body whose waits for the next chunk are counted by an :class:`IdleWatch`."""

    def __init__(self, inner: Any, watch: IdleWatch) -> None:
        self.inner, self.watch = inner, watch

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self.inner)
        while True:
            started = time.monotonic()
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            self.watch.add_wait(time.monotonic() - started)
            yield chunk

    def close(self) -> None:
        self.inner.close()


__all__ = ["IdleWatch"]
