"""Provider adapters, one module per wire API, looked up by adapter name."""

from __future__ import annotations

# HTTPError is the spec's LittleGhost::Providers::HTTPError.
from lg_core.errors import MAX_ERROR_BODY_CHARS, HTTPError
from lg_core.providers.anthropic import AnthropicProvider
from lg_core.providers.base import Provider
from lg_core.providers.gemini import GeminiProvider
from lg_core.providers.openai import OpenAIProvider
from lg_core.providers.openrouter import OpenRouterProvider
from lg_core.providers.scripted import ScriptedProvider
from lg_core.providers.vertex_ai import VertexAIProvider

BUILTIN_ADAPTERS: dict[str, type[Provider]] = {
    "anthropic": AnthropicProvider,
    "gemini": GeminiProvider,
    "openai": OpenAIProvider,
    "openrouter": OpenRouterProvider,
    "scripted": ScriptedProvider,
    "vertex_ai": VertexAIProvider,
}

__all__ = [
    "AnthropicProvider",
    "BUILTIN_ADAPTERS",
    "GeminiProvider",
    "HTTPError",
    "MAX_ERROR_BODY_CHARS",
    "OpenAIProvider",
    "OpenRouterProvider",
    "Provider",
    "ScriptedProvider",
    "VertexAIProvider",
]
