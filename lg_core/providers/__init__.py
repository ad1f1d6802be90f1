"""Provider adapters, one module per wire API, looked up by adapter name."""

from __future__ import annotations

from lg_core.providers.base import Provider
from lg_core.providers.scripted import ScriptedProvider

BUILTIN_ADAPTERS: dict[str, type[Provider]] = {"scripted": ScriptedProvider}

__all__ = ["BUILTIN_ADAPTERS", "Provider", "ScriptedProvider"]
