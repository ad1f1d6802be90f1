"""The ``session_store`` setting: checking a declaration when it is configured, and building
the store it names when a runtime starts. Kept apart from the Session object so the settings
layer can check a declaration without importing what uses the runtime."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lg_core.errors import ConfigurationError
from lg_core.sessions.base import SessionStore
from lg_core.sessions.filesystem import FilesystemSessionStore
from lg_core.sessions.memory import MemorySessionStore
from lg_core.sessions.sql import SqlSessionStore

if TYPE_CHECKING:
    from lg_core.store import RunStore

PROVIDERS: dict[str, type[SessionStore]] = {
    "sql": SqlSessionStore,
    "memory": MemorySessionStore,
    "filesystem": FilesystemSessionStore,
}
DISABLED = "none"


def check_declaration(value: Any) -> Any:
    """Validate a ``session_store`` setting (ValueError explains a bad one); returns it normalized."""
    if value is None or value is False:
        return DISABLED
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"session_store is not valid JSON: {exc}") from None
        elif text in PROVIDERS or text == DISABLED:
            return text
        else:
            raise ValueError(
                f"session_store must be one of {sorted([*PROVIDERS, DISABLED])}, "
                f"a mapping or a SessionStore, got {value!r}"
            )
    if isinstance(value, SessionStore) or (isinstance(value, type) and issubclass(value, SessionStore)):
        return value
    if isinstance(value, Mapping):
        provider = value.get("provider")
        if not (provider in PROVIDERS or (isinstance(provider, type) and issubclass(provider, SessionStore))):
            raise ValueError(
                f"session_store['provider'] must be one of {sorted(PROVIDERS)} "
                f"or a SessionStore subclass, got {provider!r}"
            )
        return {str(k): v for k, v in value.items()}
    raise ValueError(
        "session_store must be a provider name, a mapping with 'provider', "
        f"or a SessionStore, got {type(value).__name__}"
    )


def build_session_store(declaration: Any, run_store: RunStore) -> tuple[SessionStore | None, bool]:
    """The store a runtime uses, and whether the runtime owns (and closes) it."""
    declaration = check_declaration(declaration)
    if declaration == DISABLED:
        return None, False
    if isinstance(declaration, SessionStore):
        return declaration, False
    if isinstance(declaration, str):
        declaration = {"provider": declaration}
    elif isinstance(declaration, type):
        declaration = {"provider": declaration}
    options = {k: v for k, v in declaration.items() if k != "provider"}
    provider = PROVIDERS.get(declaration["provider"], declaration["provider"])
    if provider is SqlSessionStore and options.get("url", run_store.url) == run_store.url:
        return SqlSessionStore(database=run_store.db), True
    if provider is SqlSessionStore:
        # Its own database: a pool as large as the run store's (store_pool_size), so that setting
        # bounds every pool a process opens unless the declaration gives its own pool_size.
        options.setdefault("pool_size", run_store.pool_size)
    try:
        return provider(**options), True
    except TypeError as exc:
        raise ConfigurationError(
            f"session_store options {sorted(options)} do not fit {provider.__name__}: {exc}"
        ) from None


__all__ = ["DISABLED", "PROVIDERS", "build_session_store", "check_declaration"]
