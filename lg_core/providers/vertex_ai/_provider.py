"""VertexAIProvider: Gemini models hosted by Google Vertex AI.

The spec: it sends the same request content as the Gemini adapter, to the
configured Google Cloud project and location; cancellation, deadlines, streaming
events and errors behave as the Gemini adapter's. So this class is the Gemini
provider with Vertex's connection options (``_connection``): the project's URL
and an access token in place of the API key.
"""

from __future__ import annotations

import httpx

from lg_core.errors import ProviderError
from lg_core.providers._http.errors import ErrorReply
from lg_core.providers.gemini import GeminiProvider
from lg_core.providers.gemini._errors import provider_error
from lg_core.providers.vertex_ai._connection import CREDENTIAL_HINT, VertexConnection


class VertexAIProvider(GeminiProvider):
    """Streams Gemini's answers from Vertex AI's ``streamGenerateContent`` for one project and location."""

    adapter = "vertex_ai"
    options_class = VertexConnection
    settings: VertexConnection

    def provider_error(self, cause: httpx.HTTPError | ErrorReply, secret: str | None) -> ProviderError:
        return provider_error(cause, endpoint=self.endpoint, secret=secret, credential_hint=CREDENTIAL_HINT)


__all__ = ["VertexAIProvider"]
