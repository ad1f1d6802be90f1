"""A transaction's cursor running the store's compiled statements, and results read later.

:class:`Transaction` runs statements by name (compiled once per dialect by
:class:`~lg_core.store.database.Database`, see :class:`Prepared`). In a pipelined
PostgreSQL transaction, ``submit``, ``send`` and ``executemany`` are only queued,
so a commit of eight statements costs two round trips instead of eight; a
:class:`Submitted` result is read when the caller needs it.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from lg_core.store.database import Database


class StatementResult(Protocol):
    """What callers read from an executed statement: the DBAPI cursor's row count and rows."""

    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Prepared:
    """One statement's text for this dialect and how to order its parameters."""

    __slots__ = ("sql", "names", "fixed", "_getter")

    def __init__(self, sql: str, names: tuple[str, ...] | None, fixed: Mapping[str, Any]) -> None:
        self.sql = sql
        self.names = names  # parameter order for positional paramstyles
        self.fixed = dict(fixed)  # literal values SQLAlchemy turned into parameters
        self._getter = None
        if names:
            getter = operator.itemgetter(*names)
            self._getter = getter if len(names) > 1 else (lambda params: (getter(params),))

    def bind(self, params: Mapping[str, Any]) -> Any:
        if self.fixed:
            params = {**self.fixed, **params}
        if self.names is None:
            return params
        return self._getter(params) if self._getter is not None else ()


class Submitted:
    """A statement sent inside a transaction whose result is read later.

    In a pipelined PostgreSQL transaction the statement is only queued: reading
    its rows or row count first sends everything queued and waits for the
    results (one round trip for all of them). Elsewhere the statement has run
    already and its result is kept here.
    """

    __slots__ = ("_tx", "_cursor", "_rows", "_rowcount", "_sent_after")

    def __init__(self, tx: Transaction, cursor: Any, rows: list[Any] | None = None, rowcount: int = -1) -> None:
        self._tx = tx
        self._cursor = cursor  # None once the result is in _rows/_rowcount
        self._rows = rows
        self._rowcount = rowcount
        self._sent_after = tx.syncs  # a sync after this one has brought the result

    def _result(self) -> None:
        if self._cursor is None:
            return
        if self._tx.syncs == self._sent_after:
            self._tx.sync()
        cursor, self._cursor = self._cursor, None
        self._rows = cursor.fetchall() if cursor.description is not None else []
        self._rowcount = cursor.rowcount
        cursor.close()

    def one(self) -> Any:
        """The first row returned, or None."""
        self._result()
        assert self._rows is not None
        return self._rows[0] if self._rows else None

    def all(self) -> list[Any]:
        self._result()
        assert self._rows is not None
        return self._rows

    @property
    def rowcount(self) -> int:
        self._result()
        return self._rowcount


class Transaction:
    """A DBAPI cursor inside one transaction, running prepared statements.

    ``execute`` and the fetch helpers return their result at once. ``submit``,
    ``send`` and ``executemany`` may be deferred in a pipelined transaction (see
    :class:`Submitted`); a deferred statement's error surfaces at the next
    result read or at COMMIT, and rolls the transaction back either way.
    """

    def __init__(self, database: Database, cursor: Any, pipeline: Any = None) -> None:
        self._db = database
        self.cursor = cursor
        self._pipeline = pipeline  # psycopg's Pipeline in a pipelined PostgreSQL transaction
        # Statements queued since the last sync (BEGIN, when pipelined), and the syncs so far. A
        # sync with nothing queued, or one for a result an earlier sync brought, would still wait
        # for the server: psycopg sends a Sync message and reads its answer.
        self._unsynced = pipeline is not None
        self.syncs = 0

    @property
    def dialect_name(self) -> str:
        """``sqlite`` or ``postgresql``, for the few statements only one dialect has."""
        return self._db.dialect_name

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> StatementResult:
        prepared = self._db.prepared(name)
        self.cursor.execute(prepared.sql, prepared.bind(params or {}))
        if self._pipeline is not None:
            self._synced()  # callers read rowcount or rows right away
        return cast(StatementResult, self.cursor)

    def submit(self, name: str, params: Mapping[str, Any] | None = None) -> Submitted:
        """Send a statement now and read its result later (queued when pipelined)."""
        prepared = self._db.prepared(name)
        if self._pipeline is not None:
            cursor = self.cursor.connection.cursor()
            cursor.execute(prepared.sql, prepared.bind(params or {}))
            self._unsynced = True
            return Submitted(self, cursor)
        cursor = self.cursor
        cursor.execute(prepared.sql, prepared.bind(params or {}))
        rows = cursor.fetchall() if cursor.description is not None else []
        return Submitted(self, None, rows, cursor.rowcount)

    def send(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        """Run a statement whose result nobody reads (an insert): queued when pipelined."""
        prepared = self._db.prepared(name)
        self.cursor.execute(prepared.sql, prepared.bind(params or {}))
        self._unsynced = self._pipeline is not None

    def executemany(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        prepared = self._db.prepared(name)
        self.cursor.executemany(prepared.sql, [prepared.bind(row) for row in rows])
        self._unsynced = self._pipeline is not None

    def fetchone(self, name: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.execute(name, params).fetchone()

    def fetchall(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        return self.execute(name, params).fetchall()

    def sync(self) -> None:
        """Send what is queued and wait for its results (a no-op unless pipelined, or when nothing
        was queued since the last sync: every result sent before it has arrived then)."""
        if self._pipeline is not None and self._unsynced:
            self._synced()

    def _synced(self) -> None:
        self._pipeline.sync()
        self._unsynced = False
        self.syncs += 1

    def pipeline_closing(self) -> None:
        """The pipeline ends now (its exit syncs everything queued): results are read as is."""
        self._pipeline = None


__all__ = ["Prepared", "Submitted", "Transaction"]
