"""SqlSessionStore: sessions in a SQL database (SQLite or PostgreSQL), by default the run store's.

The default session store of every runtime is this store on the run store's
own database, so sessions are durable wherever runs are, and a completed
run's turn is appended in the same transaction as the run's final commit:
the session and the run can never disagree about whether the turn happened.

Atomicity: ``append`` checks ``expected_count`` in the UPDATE that moves the
count, so of two writers that loaded the same history exactly one succeeds,
whichever process or host they run on; the other gets ProtocolError.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from lg_core.errors import ConfigurationError, ProtocolError
from lg_core.messages import Message
from lg_core.sessions.base import (
    SessionSnapshot,
    SessionStore,
    check_expected_count,
    count_conflict,
    session_key,
)
from lg_core.store.database import DEFAULT_POOL_SIZE, Database
from lg_core.store.session_transactions import (
    append_session_txn,
    load_session_txn,
    replace_session_txn,
)
from lg_core.store.statements import STATEMENTS
from lg_core.store.transient_errors import retry_transient


class SqlSessionStore(SessionStore):
    """Sessions in the ``lg_sessions`` tables of a SQLAlchemy database URL.

    Pass ``url`` for a database of its own, or ``database`` to share an open
    run store's (what the runtime does by default).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        database: Database | None = None,
        synchronous: str = "FULL",
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> None:
        super().__init__()
        if (url is None) == (database is None):
            raise ConfigurationError("SqlSessionStore needs exactly one of url= (a database URL) or database=")
        self.owns_database = database is None
        self.database = (
            database
            if database is not None
            else Database(url, synchronous=synchronous, pool_size=pool_size, statements=STATEMENTS)  # type: ignore[arg-type]
        )
        if self.owns_database:
            self.database.create_schema()

    @property
    def url(self) -> str:
        return self.database.url

    def close(self) -> None:
        """Release connections (only those this store opened itself)."""
        if self.owns_database:
            self.database.dispose()

    @retry_transient
    def load(self, id: str, actor_id: str | None = None) -> SessionSnapshot | None:
        session_id, actor = session_key(id, actor_id)
        with self.database.reader() as tx:
            found = load_session_txn(tx, session_id, actor)
        if found is None:
            return None
        messages, state, metadata = found
        try:
            return SessionSnapshot(
                tuple(Message.from_dict(m) for m in messages), dict(state or {}), dict(metadata or {})
            )
        except (ValueError, TypeError) as exc:
            raise ProtocolError(f"session {session_id!r} holds a message this version cannot read: {exc}") from None

    @retry_transient
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
        with self.database.transaction() as tx:
            stored = append_session_txn(tx, *key, [m.to_dict() for m in kept], state_data, meta, expected, time.time())
            if stored is not None:
                raise count_conflict(key, stored, expected)
            found = load_session_txn(tx, *key)
        assert found is not None
        return SessionSnapshot(tuple(Message.from_dict(m) for m in found[0]), state_data, meta)

    @retry_transient
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
        with self.database.transaction() as tx:
            replace_session_txn(tx, *key, [m.to_dict() for m in kept], state_data, meta, time.time())
        return SessionSnapshot(kept, state_data, meta)


__all__ = ["SqlSessionStore"]
