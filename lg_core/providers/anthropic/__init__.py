"""The ``anthropic`` adapter: Anthropic's Messages API (``POST /v1/messages`` with ``stream: true``).

Ownership, one concern per module (the HTTP flow, the client, cancellation and
the errors every endpoint shares are in :mod:`lg_core.providers._http`):

* ``_connection``: ``api_version``, and the key sent as ``x-api-key``.
* ``_request``: a ModelRequest as a Messages request body.
* ``_stream``: Messages stream events as StreamEvents and a ModelResponse.
* ``_errors``: every failure as a ProviderError, in one function.
* ``_provider``: the Provider that ties them together.
"""

from __future__ import annotations

from lg_core.providers.anthropic._connection import DEFAULT_API_VERSION, DEFAULT_BASE_URL
from lg_core.providers.anthropic._provider import AnthropicProvider

__all__ = ["AnthropicProvider", "DEFAULT_API_VERSION", "DEFAULT_BASE_URL"]
