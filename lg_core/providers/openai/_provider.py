"""OpenAIProvider: one connection to an OpenAI-compatible Chat Completions endpoint.

The request-and-stream flow, the client and the cancellation handling are the
shared :class:`~lg_core.providers._http.provider.StreamingProvider`'s; this
class names the parts that are Chat Completions': the connection options
(``_connection``), the request body (``_request``), the stream parser
(``_stream``) and the error mapping (``_errors``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import httpx_sse

from lg_core.errors import ProviderError
from lg_core.events import StreamEvent
from lg_core.models.request import ModelRequest
from lg_core.providers._http.errors import ErrorReply
from lg_core.providers._http.provider import StreamingProvider, sequence_of
from lg_core.providers.openai._connection import OpenAIConnection
from lg_core.providers.openai._errors import provider_error
from lg_core.providers.openai._request import build_body
from lg_core.providers.openai._stream import ChunkReader, read_stream


class OpenAIProvider(StreamingProvider):
    """Streams Chat Completions from OpenAI, OpenRouter or any compatible server (``base_url``)."""

    adapter = "openai"
    options_class = OpenAIConnection
    path = "chat/completions"

    def build_body(self, request: ModelRequest, model_id: str) -> dict[str, Any]:
        return build_body(request, model_id, self.capabilities(model_id))

    def read_stream(
        self, events: Iterable[httpx_sse.ServerSentEvent], request: ModelRequest, target: str
    ) -> Iterator[StreamEvent]:
        return read_stream(
            events,
            ChunkReader(target, sequence_of(request)),
            interrupt=self.interrupter(request),
            on_error=self.error,
            endpoint=self.endpoint,
        )

    def provider_error(self, cause: httpx.HTTPError | ErrorReply, secret: str | None) -> ProviderError:
        return provider_error(cause, endpoint=self.endpoint, secret=secret)


__all__ = ["OpenAIProvider"]
