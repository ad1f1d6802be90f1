"""The ``openai`` adapter: OpenAI's Chat Completions wire API, also spoken by vLLM, Ollama,
LM Studio and other compatible servers (point ``base_url`` at them), and by OpenRouter,
whose ``openrouter`` adapter reuses this package's request building, stream reader and
error mapping.

Ownership, one concern per module (the HTTP flow, the client, cancellation and
the errors every endpoint shares are in :mod:`lg_core.providers._http`):

* ``_connection``: the options only this adapter has, and the key as a bearer token.
* ``_request``: a ModelRequest as a request body.
* ``_stream``: ``chat.completion.chunk`` events as StreamEvents and a ModelResponse.
* ``_errors``: every failure as a ProviderError, in one function.
* ``_provider``: the Provider that ties them together.
"""

from __future__ import annotations

from lg_core.providers.openai._connection import DEFAULT_BASE_URL
from lg_core.providers.openai._provider import OpenAIProvider

__all__ = ["DEFAULT_BASE_URL", "OpenAIProvider"]
