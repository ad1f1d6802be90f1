"""OpenAIProvider: one connection to an OpenAI-compatible Chat Completions endpoint.

It owns the connection's one ``httpx.Client`` (thread-safe and pooled: every
model step of the process that uses this connection shares it, DESIGN 4.8)
and ties the other parts together: the request body (``_request``), the
stream parser (``_stream``), the error mapping (``_errors``) and the ending
of a cancelled or overdue run's waits (``_interrupt``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import httpx_sse

from lg_core.errors import CredentialError, DeadlineExceededError, ProviderError
from lg_core.events import StreamEvent
from lg_core.models.request import ModelCapabilities, ModelRequest
from lg_core.providers.base import Provider
from lg_core.providers.openai._connection import CONNECT_TIMEOUT, ConnectionOptions
from lg_core.providers.openai._errors import ErrorReply, provider_error, retry_after_seconds
from lg_core.providers.openai._interrupt import (
    PendingResponse,
    abort_when_interrupted,
    check_interrupt,
)
from lg_core.providers.openai._request import build_body
from lg_core.providers.openai._stream import ChunkReader, read_stream

CHAT_COMPLETIONS = "chat/completions"
MAX_ERROR_BODY_BYTES = 64 * 1024  # read of an error response; HTTPError keeps less


class OpenAIProvider(Provider):
    """Streams Chat Completions from OpenAI, OpenRouter or any compatible server (``base_url``)."""

    adapter = "openai"

    def __init__(self, connection: str, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(connection, options)
        self.settings = ConnectionOptions.parse(connection, self.options)
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def capabilities(self, model_id: str) -> ModelCapabilities:
        return self.settings.capabilities

    def stream(self, request: ModelRequest, model_id: str) -> Iterator[StreamEvent]:
        """Stream one response; errors arrive as ProviderError (``retryable`` for transient ones)."""
        body = build_body(request, model_id, self.capabilities(model_id))
        headers = self.settings.request_headers()  # CredentialError before any request is made
        sequence = int(request.metadata.get("sequence", 0))
        target = f"{self.connection}:{model_id}"
        try:
            client = self._http()
            http_request = client.build_request(
                "POST", CHAT_COMPLETIONS, json=body, headers=headers, timeout=_timeout(request, self.settings.timeout)
            )
            with contextlib.closing(PendingResponse(client, http_request).wait(request)) as response:
                if response.status_code >= 400 or not _is_event_stream(response):
                    reply = ErrorReply(response.status_code, _bounded_text(response), retry_after_seconds(response.headers))
                    raise self._error(reply)
                forget = abort_when_interrupted(request, response)
                try:
                    yield StreamEvent.build("message_start", model=target, sequence=sequence)
                    yield from read_stream(
                        httpx_sse.EventSource(response).iter_sse(),
                        ChunkReader(target, sequence),
                        interrupt=lambda: check_interrupt(request),
                        on_error=self._error,
                        endpoint=self.settings.endpoint,
                    )
                finally:
                    forget()
        except httpx.HTTPError as exc:
            check_interrupt(request)  # a read cut short by the deadline is the deadline, not a network fault
            raise self._error(exc) from exc

    def _error(self, cause: httpx.HTTPError | ErrorReply) -> ProviderError:
        return provider_error(cause, endpoint=self.settings.endpoint, secret=self._known_key())

    def _known_key(self) -> str | None:
        try:
            return self.settings.resolve_api_key()
        except CredentialError:  # no key, so none can leak
            return None

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


def _timeout(request: ModelRequest, read_timeout: float) -> httpx.Timeout:
    """The connection's timeouts, shortened so that no wait outlasts the run's deadline."""
    limit = read_timeout
    if request.deadline is not None:
        remaining = request.deadline.timestamp() - time.time()
        if remaining <= 0:
            raise DeadlineExceededError()
        limit = min(limit, remaining)
    return httpx.Timeout(limit, connect=min(CONNECT_TIMEOUT, limit))


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


__all__ = ["OpenAIProvider"]
