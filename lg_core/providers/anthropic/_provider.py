"""AnthropicProvider: one connection to Anthropic's Messages API.

The request-and-stream flow, the client and the cancellation handling are the
shared :class:`~lg_core.providers._http.provider.StreamingProvider`'s; this
class names the parts that are the Messages API's: the connection options
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
from lg_core.providers.anthropic._connection import AnthropicConnection
from lg_core.providers.anthropic._errors import provider_error
from lg_core.providers.anthropic._request import build_body
from lg_core.providers.anthropic._stream import EventReader, read_stream


class AnthropicProvider(StreamingProvider):
    """Streams Claude's answers from the Messages API (or a server that speaks it, via ``base_url``)."""

    adapter = "anthropic"
    options_class = AnthropicConnection
    path = "v1/messages"
    keep_alive_events = frozenset({"ping"})

    def build_body(self, request: ModelRequest, model_id: str) -> dict[str, Any]:
        return build_body(request, model_id, self.capabilities(model_id))

    def read_stream(
        self, events: Iterable[httpx_sse.ServerSentEvent], request: ModelRequest, target: str
    ) -> Iterator[StreamEvent]:
        return read_stream(
            events,
            EventReader(target, sequence_of(request), self.endpoint),
            interrupt=self.interrupter(request),
            on_error=self.error,
        )

    def provider_error(self, cause: httpx.HTTPError | ErrorReply, secret: str | None) -> ProviderError:
        return provider_error(cause, endpoint=self.endpoint, secret=secret)


__all__ = ["AnthropicProvider"]
