"""StreamingProvider: one POST answered with a Server-Sent Events stream, the flow every HTTP adapter shares.

It owns the connection's one ``httpx.Client`` (thread-safe and pooled: every
model step of the process that uses this connection shares it, so connections
are pooled across steps), sends the request so that a cancelled or overdue run
stops waiting at once (``interrupt``), turns an error status or a body that is
not an event stream into the adapter's error, and hands the SSE events to the
adapter's reader.

An adapter supplies four things: its connection options class, the request
path and body, the reader that folds SSE events into StreamEvents, and the
mapping of failures to ProviderErrors. The path is ``path`` unless the adapter
overrides :meth:`request_path` (Gemini names the model in the URL).

Every exception leaving :meth:`StreamingProvider.stream` is cleaned of the
connection's secrets first (``redaction``): the adapter's own errors, a
reader's ProtocolError quoting a chunk, an httpx error and what it was raised
from. An error body is cleaned before the adapter reads it, so that no cut of
it (a quoted excerpt, HTTPError's bounded ``body``) keeps part of a secret.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

import httpx
import httpx_sse

from lg_core.errors import (
    DeadlineExceededError,
    Error,
    ProtocolError,
    ProviderError,
)
from lg_core.events import StreamEvent
from lg_core.models.request import ModelCapabilities, ModelRequest
from lg_core.providers._http.connection import CONNECT_TIMEOUT, ConnectionOptions
from lg_core.providers._http.errors import ErrorReply, retry_after_seconds
from lg_core.providers._http.idle import IdleWatch
from lg_core.providers._http.interrupt import (
    PendingResponse,
    abort_when_interrupted,
    check_interrupt,
)
from lg_core.providers._http.redaction import Secrets, watch_http_logs
from lg_core.providers.base import Provider

MAX_ERROR_BODY_BYTES = 64 * 1024  # read of an error response; HTTPError keeps less


class StreamingProvider(Provider):
    """A Provider whose every model call is one streamed HTTP request (see the module docstring)."""

    options_class: ClassVar[type[ConnectionOptions]]
    path: ClassVar[str]  # relative to the connection's base_url
    # Named events that only keep a stream alive (Anthropic's "ping"): like SSE comments, they are no data.
    keep_alive_events: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, connection: str, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(connection, options)
        self.settings = self.options_class.parse(connection, self.options)
        self.secrets = Secrets(self.settings.secret_values())
        watch_http_logs(self.secrets)  # httpx logs each request's URL, which may hold the base_url's query
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def capabilities(self, model_id: str) -> ModelCapabilities:
        return self.settings.capabilities

    def request_path(self, model_id: str) -> str:
        """The streamed request's path, relative to the base URL: ``path``, since most APIs name
        the model in the body."""
        return self.path

    @abc.abstractmethod
    def build_body(self, request: ModelRequest, model_id: str) -> dict[str, Any]:
        """The JSON body of the streamed request."""

    @abc.abstractmethod
    def read_stream(
        self, events: Iterable[httpx_sse.ServerSentEvent], request: ModelRequest, target: str
    ) -> Iterator[StreamEvent]:
        """The StreamEvents after ``message_start``, ending with ``message_stop``; call
        :meth:`interrupt` between events and raise :meth:`error` for an error frame."""

    @abc.abstractmethod
    def provider_error(self, cause: httpx.HTTPError | ErrorReply, secret: str | None) -> ProviderError:
        """The ProviderError for ``cause``; ``secret`` (the API key) must not appear in it."""

    def stream(self, request: ModelRequest, model_id: str) -> Iterator[StreamEvent]:
        """Stream one response; errors arrive as ProviderError (``retryable`` for transient ones),
        cleaned of the connection's secrets (see the module docstring)."""
        try:
            yield from self._stream(request, model_id)
        except Exception as exc:
            self.secrets.scrub(exc)  # in place: the same exception goes on, with its traceback and cause
            raise

    def _stream(self, request: ModelRequest, model_id: str) -> Iterator[StreamEvent]:
        body = self.build_body(request, model_id)
        key = self.settings.resolve_api_key()  # CredentialError before any request is made
        self.secrets.add(key)
        headers = self.settings.request_headers(key)
        target = f"{self.connection}:{model_id}"
        try:
            client = self._http()
            http_request = client.build_request(
                "POST",
                self.settings.request_target(self.request_path(model_id)),
                json=body,
                headers=headers,
                timeout=_timeout(request, self.settings.timeout),
            )
            with contextlib.closing(PendingResponse(client, http_request).wait(request)) as response:
                if response.status_code >= 400 or not _is_event_stream(response):
                    reply = ErrorReply(
                        response.status_code, _bounded_text(response), retry_after_seconds(response.headers)
                    )
                    raise self.error(reply)
                forget = abort_when_interrupted(request, response)
                try:
                    yield StreamEvent.build("message_start", model=target, sequence=sequence_of(request))
                    idle = IdleWatch(self.settings.timeout, self.endpoint, self.keep_alive_events)
                    response.stream = _BoundedStream(idle.body(response.stream), self.settings)
                    events = idle.events(httpx_sse.EventSource(response).iter_sse())
                    yield from self._read_checked(events, request, target)
                finally:
                    forget()
        except httpx.HTTPError as exc:
            check_interrupt(request)  # a read cut short by the deadline is the deadline, not a network fault
            raise self.error(exc) from exc

    def _read_checked(
        self, events: Iterable[httpx_sse.ServerSentEvent], request: ModelRequest, target: str
    ) -> Iterator[StreamEvent]:
        """:meth:`read_stream`, where a chunk of a shape the reader does not expect (a string where
        an object goes) is the provider's ProtocolError, which ``after_model_error`` sees, not a
        bare AttributeError or TypeError from deep in the reader that failed the run."""
        try:
            yield from self.read_stream(events, request, target)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            if isinstance(exc, Error):
                raise
            raise ProtocolError(
                f"{self.endpoint} sent a stream of an unexpected shape, which the {self.adapter} adapter "
                f"could not read ({type(exc).__name__}: {exc})"
            ) from exc

    def error(self, cause: httpx.HTTPError | ErrorReply) -> ProviderError:
        """:meth:`provider_error` of ``cause``, an error body cleaned of the connection's secrets first."""
        if isinstance(cause, ErrorReply):
            cause = dataclasses.replace(cause, body=self.secrets.redact(cause.body))
        return self.secrets.scrub(self.provider_error(cause, self.secrets.latest))

    @staticmethod
    def interrupter(request: ModelRequest) -> Callable[[], None]:
        """The check a reader makes between events: CancelledError or DeadlineExceededError when due."""
        return lambda: check_interrupt(request)

    @property
    def endpoint(self) -> str:
        return self.settings.endpoint

    def _http(self) -> httpx.Client:
        """The shared client, built on first use (and again after ``close``)."""
        with self._lock:
            if self._client is None:
                self._client = self.settings.build_client()
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def sequence_of(request: ModelRequest) -> int:
    """How many model calls the conversation made before this one (the engine's ``sequence``)."""
    return int(request.metadata.get("sequence", 0))


def _timeout(request: ModelRequest, read_timeout: float) -> httpx.Timeout:
    """The connection's timeouts, shortened so that no wait outlasts the run's deadline."""
    limit = read_timeout
    if request.deadline is not None:
        remaining = request.deadline.timestamp() - time.time()
        if remaining <= 0:
            raise DeadlineExceededError()
        limit = min(limit, remaining)
    return httpx.Timeout(limit, connect=min(CONNECT_TIMEOUT, limit))


class _BoundedStream(httpx.SyncByteStream):
    """A response body that fails once it has sent more than the connection's ``max_response_bytes``.

    Counted as the bytes arrive, not per event: a server sending one endless line
    would otherwise be read whole before its first event ends. Not retried: the
    same request would most likely run away again.
    """

    def __init__(self, inner: Any, settings: ConnectionOptions) -> None:
        self.inner, self.settings = inner, settings

    def __iter__(self) -> Iterator[bytes]:
        limit, received = self.settings.max_response_bytes, 0
        for chunk in self.inner:
            received += len(chunk)
            if received > limit:
                raise ProviderError(
                    f"the response from {self.settings.endpoint} passed max_response_bytes ({limit} bytes) "
                    "and was cut off; "
                    "raise the connection's max_response_bytes if answers this long are expected"
                )
            yield chunk

    def close(self) -> None:
        self.inner.close()


def _is_event_stream(response: httpx.Response) -> bool:
    """The check httpx_sse makes, made before reading: a JSON body in its place is read as an error reply."""
    return "text/event-stream" in response.headers.get("content-type", "")


def _bounded_text(response: httpx.Response) -> str:
    """At most MAX_ERROR_BODY_BYTES of an error body: a misbehaving server may send megabytes."""
    data = bytearray()
    for piece in response.iter_bytes():
        data.extend(piece)
        if len(data) >= MAX_ERROR_BODY_BYTES:
            break
    return bytes(data[:MAX_ERROR_BODY_BYTES]).decode("utf-8", errors="replace")


__all__ = ["StreamingProvider", "sequence_of"]
