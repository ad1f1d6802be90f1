"""Connection options of the Anthropic adapter: the shared ones (see
:mod:`lg_core.providers._http.connection`) and ``api_version``, the
``anthropic-version`` header every request carries beside the key in ``x-api-key``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from lg_core.models.request import ModelCapabilities
from lg_core.providers._http.connection import ConnectionOptions

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_API_VERSION = "2023-06-01"  # the spec's default, and the version Anthropic documents


@dataclasses.dataclass(frozen=True)
class AnthropicConnection(ConnectionOptions):
    """Options of one Anthropic connection; the key is never in its repr."""

    adapter: ClassVar[str] = "anthropic"
    default_base_url: ClassVar[str] = DEFAULT_BASE_URL
    key_variable: ClassVar[str] = "ANTHROPIC_API_KEY"
    extra_options: ClassVar[frozenset[str]] = frozenset({"api_version"})

    api_version: str = DEFAULT_API_VERSION

    @classmethod
    def default_capabilities(cls) -> ModelCapabilities:
        """Every Claude model takes tools and ``tool_choice``; native structured output
        (``output_config.format``) only the recent ones, so it is off unless
        ``capabilities: {native_structured_output: true}`` turns it on, and a result
        schema goes through a tool call meanwhile."""
        return ModelCapabilities(tools=True, tool_choice=True, native_structured_output=False)

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key, "anthropic-version": self.api_version}


__all__ = ["AnthropicConnection", "DEFAULT_API_VERSION", "DEFAULT_BASE_URL"]
