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

from lg_core.errors import SessionActorError
from lg_core.messages import Message
from lg_core.sessions.base import (
    SessionKey,
    SessionSnapshot,
    SessionStore,
    check_expected_count,
    count_conflict,
    session_key,
)

Entry = tuple[tuple[Message, ...], dict[str, Any], dict[str, Any]]


class MemorySessionStore(SessionStore):
    """Snapshots in a dict by session id, each with its owner, guarded by one lock;
    every read returns copies."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._data: dict[str, tuple[str | None, Entry]] = {}

    def load(self, id: str, actor_id: str | None = None) -> SessionSnapshot | None:
        key = session_key(id, actor_id)
        with self._lock:
            entry = self._owned(key)
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
            current = self._owned(key)
            stored = () if current is None else current[0]
            if len(stored) != expected:
                raise count_conflict(key, len(stored), expected)
            entry = (stored + kept, state_data, meta)
            self._data[key[0]] = (key[1], entry)
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
            self._owned(key)
            self._data[key[0]] = (key[1], entry)
        return _snapshot(entry)

    def _owned(self, key: SessionKey) -> Entry | None:
        """The session's entry, None before its first write; SessionActorError when another
        actor owns it. Called under the lock, so the check and a write that follows are one step."""
        found = self._data.get(key[0])
        if found is None:
            return None
        owner, entry = found
        if owner != key[1]:
            raise SessionActorError.for_session(key[0])
        return entry


def _snapshot(entry: Entry) -> SessionSnapshot:
    messages, state, metadata = entry
    return SessionSnapshot(messages, copy.deepcopy(state), copy.deepcopy(metadata))


__all__ = ["MemorySessionStore"]
