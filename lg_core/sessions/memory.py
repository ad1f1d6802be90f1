"""MemorySessionStore: sessions for the life of one process (spec: SessionStores::Memory).

Useful for tests and single-process tools. Data disappears when the process
exits, so runs on other processes (workers) never see it: use the SQL store
(the default, in the run store's database) or the filesystem store when a
conversation must survive a restart or continue elsewhere.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from lg_core.messages import Message
from lg_core.sessions.base import (
    SessionKey,
    SessionSnapshot,
    SessionStore,
    check_expected_count,
    count_conflict,
    session_key,
)


class MemorySessionStore(SessionStore):
    """Snapshots in a dict guarded by one lock; every read returns copies."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._data: dict[SessionKey, tuple[tuple[Message, ...], dict[str, Any], dict[str, Any]]] = {}

    def load(self, id: str, actor_id: str | None = None) -> SessionSnapshot | None:
        key = session_key(id, actor_id)
        with self._lock:
            entry = self._data.get(key)
        return None if entry is None else _snapshot(entry)

    def append(
        self,
        id: str,
        *,
        messages: Iterable[Any],
        state: Mapping[str, Any] | None,
        metadata: Mapping[str, Any] | None,
        expected_count: int,
        actor_id: str | None = None,
    ) -> SessionSnapshot:
        key, kept, state_data, meta = self._prepare(id, actor_id, messages, state, metadata)
        expected = check_expected_count(expected_count)
        with self._lock:
            current = self._data.get(key)
            stored = () if current is None else current[0]
            if len(stored) != expected:
                raise count_conflict(key, len(stored), expected)
            entry = (stored + kept, state_data, meta)
            self._data[key] = entry
        return _snapshot(entry)

    def replace(
        self,
        id: str,
        *,
        messages: Iterable[Any],
        state: Mapping[str, Any] | None,
        metadata: Mapping[str, Any] | None,
        actor_id: str | None = None,
    ) -> SessionSnapshot:
        key, kept, state_data, meta = self._prepare(id, actor_id, messages, state, metadata)
        entry = (kept, state_data, meta)
        with self._lock:
            self._data[key] = entry
        return _snapshot(entry)


def _snapshot(entry: tuple[tuple[Message, ...], dict[str, Any], dict[str, Any]]) -> SessionSnapshot:
    messages, state, metadata = entry
    return SessionSnapshot(messages, copy.deepcopy(state), copy.deepcopy(metadata))


__all__ = ["MemorySessionStore"]
