"""The ``gemini`` adapter: Google's Gemini API (``POST /v1beta/models/<model>:streamGenerateContent?alt=sse``).

Ownership, one concern per module (the HTTP flow, the client, cancellation and
the errors every endpoint shares are in :mod:`lg_core.providers._http`):

* ``_connection``: ``api_version``, the model's path, and the key sent as ``x-goog-api-key``.
* ``_schema``: JSON Schema as Gemini's OpenAPI-subset Schema, or a clear refusal.
* ``_signatures``: thought signatures and generated call ids, kept for the next request.
* ``_request``: a ModelRequest as a generateContent request body.
* ``_stream``: streamed GenerateContentResponse chunks as StreamEvents and a ModelResponse.
* ``_errors``: every failure as a ProviderError, in one function.
* ``_provider``: the Provider that ties them together.
"""

from __future__ import annotations

from lg_core.providers.gemini._connection import DEFAULT_API_VERSION, DEFAULT_BASE_URL
from lg_core.providers.gemini._provider import GeminiProvider

__all__ = ["DEFAULT_API_VERSION", "DEFAULT_BASE_URL", "GeminiProvider"]
