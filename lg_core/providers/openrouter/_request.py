"""Request building for OpenRouter: the Chat Completions body, plus what OpenRouter adds.

* Reasoning goes back. OpenRouter streams a model's reasoning as ``reasoning_details``
  (kept in the response's Reasoning block, see ``_stream``) and asks for them back on the
  assistant message, unchanged: Anthropic and Gemini models need them (signatures,
  encrypted reasoning) to continue reasoning across tool calls.
* Routing preferences: a ``provider`` model setting, with the connection's ``provider``
  option over it (connection policy wins).
* Capability routing (the spec: requests that need a capability ask OpenRouter to route
  only to providers that advertise it): a request with native structured output, or with
  required capabilities, sends ``provider.require_parameters: true`` unless the routing
  preferences set it. Tool requests need nothing: OpenRouter routes those only to
  providers with tool use anyway.
* With ``require_parameters`` a provider must take every parameter sent, so settings the
  model's ``supported_parameters`` (when the connection knows them) do not list are left
  out rather than making the request unroutable (the spec's ``prepare_request``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from lg_core.content import Reasoning
from lg_core.datamap import thaw
from lg_core.errors import ConfigurationError
from lg_core.messages import Message
from lg_core.models.request import ModelCapabilities, ModelRequest
from lg_core.providers.openai._request import Dialect
from lg_core.providers.openai._request import build_body as chat_body

# Settings that steer OpenRouter rather than the model: never in ``supported_parameters``, never left out.
ROUTING_SETTINGS = frozenset(
    {"provider", "models", "route", "transforms", "plugins", "user", "session_id", "usage", "metadata"}
)
# Settings OpenRouter lists under another parameter's name in ``supported_parameters``.
PARAMETER_OF = {"reasoning_effort": "reasoning", "max_completion_tokens": "max_tokens"}

logger = logging.getLogger(__name__)


def reasoning_details(message: Message) -> dict[str, Any]:
    """The ``reasoning_details`` of an assistant message: its Reasoning blocks' OpenRouter details, as received.

    Only OpenRouter's own kinds (``reasoning.text``, ``reasoning.summary``,
    ``reasoning.encrypted``) go back: a conversation that another adapter
    continued holds that adapter's details too (e.g. a Gemini thought signature),
    which OpenRouter would refuse.
    """
    details = [
        thaw(detail)
        for block in message.content
        if isinstance(block, Reasoning)
        for detail in block.details or ()
        if str(detail.get("type", "")).startswith("reasoning.")
    ]
    return {"reasoning_details": details} if details else {}


DIALECT = Dialect(adapter="openrouter", assistant_fields=reasoning_details)


def build_body(
    request: ModelRequest, model_id: str, capabilities: ModelCapabilities, routing: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON body for one streamed call through OpenRouter; ``routing`` is the connection's ``provider``."""
    needs_capability = bool(request.required_capabilities) or (
        request.output_schema is not None and capabilities.native_structured_output
    )
    if needs_capability:
        request = _supported_settings(request, capabilities)
    body = chat_body(request, model_id, capabilities, DIALECT)
    preferences = {**_setting_preferences(body.get("provider")), **routing}
    if needs_capability:
        preferences.setdefault("require_parameters", True)
    if preferences:
        body["provider"] = preferences
    return body


def _setting_preferences(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"model setting 'provider' must be a mapping of OpenRouter routing preferences "
            f"such as {{'sort': 'throughput'}}, got {type(value).__name__}"
        )
    return dict(value)


def _supported_settings(request: ModelRequest, capabilities: ModelCapabilities) -> ModelRequest:
    """``request`` without the settings its model does not take, when its parameters are known."""
    if capabilities.supported_parameters is None:
        return request
    dropped = sorted(
        key
        for key in request.settings
        if key not in ROUTING_SETTINGS and not capabilities.supports_parameter(PARAMETER_OF.get(key, key))
    )
    if not dropped:
        return request
    logger.info(
        "leaving out settings the model does not support (OpenRouter routes by parameters): %s", ", ".join(dropped)
    )
    return request.replace(settings={key: value for key, value in request.settings.items() if key not in dropped})


__all__ = ["DIALECT", "PARAMETER_OF", "ROUTING_SETTINGS", "build_body", "reasoning_details"]
