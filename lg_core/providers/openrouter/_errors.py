"""What to do about OpenRouter's error statuses, added to their messages.

The mapping itself is the openai package's (``provider_error``): OpenRouter answers
with the same ``{"error": {"code", "message", "metadata"}}`` shape, and its statuses
retry the same way: 408, 429, 502 and 503 are retried (after the wait ``Retry-After``
asks for), 400, 401, 402, 403 and 404 are not. Only the advice differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

STATUS_HINTS: Mapping[int, str] = MappingProxyType(
    {
        401: "Check the connection's api_key or api_key_env (by default $OPENROUTER_API_KEY).",
        402: (
            "The OpenRouter account or this API key has run out of credits, so retrying will not help: "
            "add credits at https://openrouter.ai/credits or raise the key's credit limit."
        ),
        403: (
            "OpenRouter refused the input for this model (moderation flagged it): "
            "change the input or choose another model."
        ),
        404: (
            "OpenRouter has no provider for this model that accepts the request: check the model id "
            "(https://openrouter.ai/models) and the routing preferences (the connection's and the 'provider' setting)."
        ),
    }
)

__all__ = ["STATUS_HINTS"]
