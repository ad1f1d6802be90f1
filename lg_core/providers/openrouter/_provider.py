"""OpenRouterProvider: one connection to OpenRouter (the spec's ``Providers::OpenRouter``).

OpenRouter serves OpenAI's Chat Completions API, so this provider is built from
shared parts: the request-and-stream flow, client and cancellation of
:class:`~lg_core.providers._http.provider.StreamingProvider`, and the openai
package's request building, stream parsing and error mapping, each given
OpenRouter's extras: its options (``_connection``), request (``_request``),
stream (``_stream``) and error advice (``_errors``).
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
from lg_core.providers.openai._errors import provider_error
from lg_core.providers.openai._stream import read_stream
from lg_core.providers.openrouter._connection import OpenRouterConnection
from lg_core.providers.openrouter._errors import STATUS_HINTS
from lg_core.providers.openrouter._request import build_body
from lg_core.providers.openrouter._stream import OpenRouterChunkReader


class OpenRouterProvider(StreamingProvider):
    """Streams models routed through OpenRouter; ``model_id`` is OpenRouter's (``openai/gpt-5.6-luna``)."""

    adapter = "openrouter"
    options_class = OpenRouterConnection
    path = "chat/completions"
    settings: OpenRouterConnection

    def build_body(self, request: ModelRequest, model_id: str) -> dict[str, Any]:
        return build_body(request, model_id, self.capabilities(model_id), self.settings.provider)

    def read_stream(
        self, events: Iterable[httpx_sse.ServerSentEvent], request: ModelRequest, target: str
    ) -> Iterator[StreamEvent]:
        return read_stream(
            events,
            OpenRouterChunkReader(target, sequence_of(request)),
            interrupt=self.interrupter(request),
            on_error=self.error,
            endpoint=self.endpoint,
        )

    def provider_error(self, cause: httpx.HTTPError | ErrorReply, secret: str | None) -> ProviderError:
        return provider_error(cause, endpoint=self.endpoint, secret=secret, hints=STATUS_HINTS)


__all__ = ["OpenRouterProvider"]
