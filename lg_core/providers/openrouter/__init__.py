"""The ``openrouter`` adapter: models routed through OpenRouter, over its Chat Completions API.

``configure(providers={"openrouter": {"adapter": "openrouter"}})`` is a complete
connection (the key comes from ``$OPENROUTER_API_KEY``), and a connection named
``openrouter`` is built in, so ``model = "openrouter:openai/gpt-5.6-luna"`` works
with only the key set. The HTTP flow is the shared one (:mod:`lg_core.providers._http`)
and the Chat Completions request building and stream parsing are the ``openai``
package's; this package holds what OpenRouter adds, one concern per module:

* ``_connection``: base URL and key defaults, app attribution (``site_url``,
  ``app_name``), routing preferences (``provider``), capabilities from
  ``supported_parameters``.
* ``_request``: reasoning details sent back, routing preferences, capability routing.
* ``_stream``: reasoning details, upstream provider and cost kept from the stream.
* ``_errors``: what to do about OpenRouter's error statuses (402: out of credits).
* ``_provider``: the Provider that ties them together.

OpenRouter's model catalog (the spec's ``OpenRouter::CatalogSource``) is not read:
capabilities come from the connection's ``capabilities`` option, permissive by default.
"""

from __future__ import annotations

from lg_core.providers.openrouter._connection import API_KEY_ENV, DEFAULT_BASE_URL
from lg_core.providers.openrouter._provider import OpenRouterProvider

__all__ = ["API_KEY_ENV", "DEFAULT_BASE_URL", "OpenRouterProvider"]
