"""Provider adapters, one module per wire API, looked up by adapter name.

The built-in adapters are registered by dotted path, not imported: an adapter's
module (and httpx with it) loads the first time a model on one of its
connections is resolved (:func:`adapter_class`), so a process that calls one
provider, or only the scripted models, does not pay for the others at start.
The adapter classes stay importable from here (PEP 562).
"""

from __future__ import annotations

from importlib import import_module
from pkgutil import resolve_name
from typing import TYPE_CHECKING, Any

# HTTPError is the spec's LittleGhost::Providers::HTTPError.
from lg_core.errors import MAX_ERROR_BODY_CHARS, HTTPError

if TYPE_CHECKING:
    from lg_core.providers.anthropic import AnthropicProvider
    from lg_core.providers.base import Provider
    from lg_core.providers.gemini import GeminiProvider
    from lg_core.providers.openai import OpenAIProvider
    from lg_core.providers.openrouter import OpenRouterProvider
    from lg_core.providers.scripted import ScriptedProvider
    from lg_core.providers.vertex_ai import VertexAIProvider

BUILTIN_ADAPTERS: dict[str, str] = {
    "anthropic": "lg_core.providers.anthropic:AnthropicProvider",
    "gemini": "lg_core.providers.gemini:GeminiProvider",
    "openai": "lg_core.providers.openai:OpenAIProvider",
    "openrouter": "lg_core.providers.openrouter:OpenRouterProvider",
    "scripted": "lg_core.providers.scripted:ScriptedProvider",
    "vertex_ai": "lg_core.providers.vertex_ai:VertexAIProvider",
}
_CLASSES = {
    "Provider": "lg_core.providers.base",
    **{path.split(":")[1]: path.split(":")[0] for path in BUILTIN_ADAPTERS.values()},
}


def adapter_class(adapter: type[Provider] | str) -> type[Provider]:
    """The Provider subclass an adapter registry entry names: a class, or its ``module:Class`` path."""
    return resolve_name(adapter) if isinstance(adapter, str) else adapter


def __getattr__(name: str) -> Any:
    """Import an adapter class on first use (PEP 562)."""
    if name not in _CLASSES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_CLASSES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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
    "adapter_class",
]
