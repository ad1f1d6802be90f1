"""The run store's database: its engine and connections, and how transactions open and end.

SQLAlchemy owns the schema, the dialect and the connection pool. The hot path
(one commit per step) executes statements that SQLAlchemy compiled once per
dialect, through the DBAPI cursor: measured on SQLite, a Core ``execute``
costs ~40 us of Python per statement while the compiled text costs ~5 us, and
a step runs about six statements. Dialect differences (SQLite's
``BEGIN IMMEDIATE``, PostgreSQL's row locks) are small overrides here.

Connections run in autocommit on both dialects: a read sends only its
statement, and a write transaction sends its own BEGIN and COMMIT. On
PostgreSQL a pooled connection is not pinged at checkout (a round trip each).

A step's commit and a worker's claim use ``transaction(pipelined=True)``: on
PostgreSQL the statements whose results are read later (``Transaction.submit``)
and the inserts go out in psycopg's pipeline mode, so a commit of eight
statements costs two round trips instead of eight (measured with fsync on: half
the wall time of the commit, ~40 % less client and server CPU). SQLite runs in
process and executes every statement at once either way.

The statements' cursor is lg_core.store.transactions; which errors a whole
transaction is tried again for is lg_core.store.transient_errors; the URL a
store is opened from is checked by lg_core.store.store_urls.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, cast

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from lg_core.errors import ConfigurationError, RunStateError
from lg_core.store.store_urls import check_sqlite_path, parse_store_url, unsupported_store
from lg_core.store.transactions import Prepared, Transaction
from lg_core.store.transient_errors import driver_reason, retry_transient
from lg_core.urls import safe_url

log = logging.getLogger(__name__)

POSTGRES_CONNECT_TIMEOUT = 10  # seconds; see Database._create_engine
# Most PostgreSQL connections one process holds at once, and keeps open between uses
# (the store_pool_size setting). No overflow beyond it: SQLAlchemy closes an overflow
# connection as soon as it is returned, so the 64 threads of a default ``lg worker``
# over a pool of 10 (+20 overflow) opened a new server session every two or three
# runs, and each new backend (fork, authentication, statements prepared again) cost
# PostgreSQL about 5 ms of CPU per run. The peak is the same 30 as before; the pool
# now keeps them.
DEFAULT_POOL_SIZE = 30
SQLITE_BUSY_SECONDS = 30  # how long a SQLite statement waits for another connection's lock
DISPOSE_WAIT_SECONDS = 5.0


class StoreClosedError(RunStateError):
    """The run store was closed (with its runtime or configuration) while something still used it."""


def _require_utf8(url: str, dbapi_connection: Any, _record: Any) -> None:
    """Refuse a PostgreSQL database that is not encoded UTF8, naming the fix.

    The store keeps messages and events as JSON text. In a SQL_ASCII database
    (what ``initdb`` makes where no UTF-8 locale is set, e.g. a bare container)
    psycopg returns text as bytes, and the first connection then failed inside
    SQLAlchemy with "cannot use a string pattern on a bytes-like object".
    """
    encoding = dbapi_connection.info.parameter_status("server_encoding")
    if encoding is not None and encoding != "UTF8":
        raise ConfigurationError(
            f"run_store {safe_url(url)} is a database encoded {encoding}; LittleGhost keeps JSON text and "
            "needs UTF8: create the database with CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0 "
            "(or initialise the server with initdb -E UTF8)"
        )


class Database:
    """The engine, its dialect-specific transaction handling and statement cache."""

    def __init__(
        self,
        url: str,
        *,
        synchronous: str = "FULL",
        pool_size: int = DEFAULT_POOL_SIZE,
        statements: Mapping[str, Callable[[], ClauseElement]],
    ) -> None:
        parsed = parse_store_url(
            url,
            "run_store {url!r} is not a database URL{reason}; use 'sqlite://' (in memory), "
            "'sqlite:///path/to/runs.db' or 'postgresql+psycopg://user@host/db'",
        )
        self.url = url
        self.dialect_name: str = parsed.get_backend_name()
        if self.dialect_name not in ("sqlite", "postgresql"):
            raise ConfigurationError(unsupported_store(url, self.dialect_name))
        self.in_memory = self.dialect_name == "sqlite" and parsed.database in (None, "", ":memory:")
        opened = url
        if self.dialect_name == "sqlite" and not self.in_memory and "uri" not in parsed.query:
            opened = check_sqlite_path(url, parsed.database)  # with ~ expanded, as the check read it
        self._synchronous = synchronous.upper()
        if self._synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigurationError(f"sqlite_synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        self.engine = self._create_engine(opened, pool_size)
        self._builders = dict(statements)
        self._prepared: dict[str, Prepared] = {}
        self._lock = threading.RLock() if self.in_memory else None
        # A SQLite file takes one writer at a time. This process's writers queue here, and each
        # starts the moment the previous one commits; waiting in SQLite's busy handler instead
        # sleeps in steps of up to 100 ms, so parallel branches ending together would wait 10-20 ms
        # for a lock that is free after one. Other processes still wait in the busy handler.
        self._file_writers = threading.RLock() if self.dialect_name == "sqlite" and not self.in_memory else None
        self._local = threading.local()
        self._opened: dict[int, Any] = {}  # id -> raw connection held by a live thread
        # Connections in use right now, so dispose() never closes one under a running statement
        # (closing a SQLite connection another thread is executing on can crash the process).
        self._users = threading.Lock()
        self._in_use = 0
        self._disposed = False

    def _create_engine(self, url: str, pool_size: int) -> Engine:
        if self.dialect_name == "sqlite":
            options: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": SQLITE_BUSY_SECONDS}}
            if self.in_memory:
                options["poolclass"] = StaticPool
                # One connection shared by every thread (under self._lock): a thread that
                # ends gives its handle back, and a reset-on-return ROLLBACK then would end
                # another thread's open transaction. Transactions here end themselves.
                options["pool_reset_on_return"] = None
            else:
                # One connection per live thread (see _sqlite_connection): no cap, or
                # the 16th concurrent thread (e.g. runs started on threads) would wait forever.
                options["max_overflow"] = -1
            engine = create_engine(url, **options)
            event.listen(engine, "connect", self._configure_sqlite)
            return engine
        try:
            # No pool_pre_ping: it costs a round trip per checkout (several per step). A
            # connection the server dropped fails at its first statement, before any
            # write, so retry_transient repeats the whole call on a fresh connection
            # (and _connection() invalidates the pool's older connections with it).
            #
            # A connection attempt gives up after POSTGRES_CONNECT_TIMEOUT seconds unless the URL
            # says otherwise (?connect_timeout=N): without one, a server or a forwarded port that
            # accepts the connection but never answers hangs every command (and a worker's step) for good.
            timeout = {} if "connect_timeout" in make_url(url).query else {"connect_timeout": POSTGRES_CONNECT_TIMEOUT}
            engine = create_engine(url, pool_size=pool_size, max_overflow=0, connect_args=timeout)
            # Ahead of SQLAlchemy's own first-connect work, which a non-UTF8 database breaks obscurely.
            event.listen(engine, "first_connect", functools.partial(_require_utf8, url), insert=True)
            return engine
        except ModuleNotFoundError as exc:
            if exc.name != "psycopg":  # another driver named in the URL (postgresql+psycopg2://, +asyncpg://)
                raise ConfigurationError(
                    f"run_store {safe_url(url)} names the PostgreSQL driver {exc.name!r}, which is not installed; "
                    "LittleGhost uses psycopg 3: write the URL as postgresql+psycopg://user@host/db"
                ) from None
            raise ConfigurationError(
                f"the PostgreSQL driver is not installed ({exc.name}); pip install 'littleghost[postgres]'"
            ) from None

    def _configure_sqlite(self, dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN IMMEDIATE ourselves
        cursor = dbapi_connection.cursor()
        if not self.in_memory:
            _switch_to_wal(cursor)
        cursor.execute(f"PRAGMA synchronous={self._synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_SECONDS * 1000)}")
        cursor.close()

    def create_schema(self) -> None:
        """Create or migrate the schema (an in-memory store is simply created).

        A server that is down, a wrong port or a missing database fails here, where
        the runtime is built: a ConfigurationError naming the store and the server's
        reason, rather than SQLAlchemy's OperationalError out of ``start_execution``.
        """
        from sqlalchemy.exc import OperationalError

        from lg_core.store.migrate import migrate

        try:
            with self.engine.connect():
                pass
        except OperationalError as exc:
            raise ConfigurationError(
                f"cannot open the run store {safe_url(self.url)} (check run_store or LG_RUN_STORE, that its "
                f"server is running and that the database exists): {driver_reason(exc)}"
            ) from exc
        migrate(self.engine, in_memory=self.in_memory)

    def prepared(self, name: str) -> Prepared:
        prepared = self._prepared.get(name)
        if prepared is None:
            statement = self._builders[name]()
            # Every statement is a SELECT or DML, compiled by the dialect's SQLCompiler (not a DDLCompiler).
            compiled = cast(SQLCompiler, statement.compile(dialect=self.engine.dialect))
            # A positional dialect's compiler always records the order of the parameters.
            names = tuple(cast("list[str]", compiled.positiontup)) if self.engine.dialect.positional else None
            fixed = {name: bind.value for name, bind in compiled.binds.items() if not bind.required}
            prepared = Prepared(str(compiled), names, fixed)
            self._prepared[name] = prepared
        return prepared

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        self._enter()
        try:
            if self.dialect_name != "sqlite":
                with self._postgres_connection() as raw:
                    yield raw
            elif self._lock is not None:
                # An in-memory store has a single connection, shared under a lock.
                with self._lock:
                    yield self._sqlite_connection()
            else:
                # One SQLite connection per thread (the pool checkout cost more than a step's statements).
                yield self._sqlite_connection()
        finally:
            with self._users:
                self._in_use -= 1

    def _enter(self) -> None:
        """Count a use of a connection, or raise StoreClosedError once ``dispose`` began."""
        with self._users:
            if self._disposed:
                raise StoreClosedError(
                    f"the run store {safe_url(self.url)} is closed (its runtime or configuration was closed)"
                )
            self._in_use += 1

    @contextmanager
    def _postgres_connection(self) -> Iterator[Any]:
        """A pooled connection in autocommit for as long as the store uses it.

        In autocommit a read sends only its statement (no BEGIN ... ROLLBACK round
        trips around it) and ``transaction()`` sends BEGIN and COMMIT itself, as
        the SQLite path does. Switching the flag is client-side while the
        connection is idle, and it is switched back before the connection returns
        to the pool, so SQLAlchemy's own users of the engine (migrations) keep
        their transactions. The pool's reset-on-return is psycopg's rollback(),
        which sends nothing on an idle connection.
        """
        raw = self.engine.raw_connection()
        driver: Any = raw.driver_connection  # psycopg's Connection (None only for an invalidated connection)
        try:
            driver.autocommit = True
            yield raw
        except Exception as exc:
            self._discard_after_error(raw, exc)
            raise
        finally:
            try:
                if raw.is_valid:
                    driver.autocommit = False
            except Exception as exc:  # noqa: BLE001 - e.g. left inside a transaction: never reuse it
                raw.invalidate(exc)
            raw.close()

    def _discard_after_error(self, raw: Any, exc: Exception) -> None:
        """Never reuse a connection on which the database raised.

        After a dropped connection, recycle it and every pooled connection
        opened before it: a server restart drops them all, and without this each
        retry would draw another dead connection from the pool (SQLAlchemy's own
        Connection does the same on a disconnect, through the same pool call).

        After any other error from the server, close just this connection.
        psycopg prepares a statement on the server the sixth time a connection
        runs it, and records it as prepared when it sends it. If that execution
        fails or is skipped (in a pipeline the server skips everything after an
        error, as it does after a commit's lost race), the record stays while
        the server has no such statement, and every later use of it on this
        connection fails with "prepared statement _pg3_N does not exist": a
        step's commit then failed on every attempt until its run failed (300
        parallel tool calls on one turn did it within seconds). Turning
        prepared statements off avoids that but doubled PostgreSQL's CPU per
        step (0.78 to 1.67 ms); a failed transaction is rare (a lost race), and
        a new connection costs a few milliseconds once.
        """
        # The stubs take only a DBAPI Error; the dialects check the exception's type themselves.
        if self.engine.dialect.is_disconnect(exc, raw.driver_connection, None):  # type: ignore[arg-type]
            self.engine.pool._invalidate(raw, exc)
        elif isinstance(exc, self.engine.dialect.loaded_dbapi.Error):
            raw.invalidate(exc)

    def _sqlite_connection(self) -> Any:
        held = getattr(self._local, "held", None)
        if held is None:
            held = _ThreadConnection(self.engine.raw_connection(), self._opened)
            self._local.held = held
        return held.raw

    @property
    def defers_flush(self) -> bool:
        """Does a transaction here wait for the disk, so deferring that is worth it? (A SQLite file
        store syncing each commit: FULL or EXTRA. At NORMAL or OFF no commit waits, so there is
        nothing to defer and no claim to flush afterwards.)"""
        return self.dialect_name == "sqlite" and not self.in_memory and self._synchronous in ("FULL", "EXTRA")

    @contextmanager
    def transaction(self, *, pipelined: bool = False, defer_flush: bool = False) -> Iterator[Transaction]:
        """One write transaction; commits on success, rolls back on any error.

        Both dialects run their connections in autocommit and send BEGIN and
        COMMIT themselves (SQLite's BEGIN IMMEDIATE takes the write lock up front).
        ``pipelined`` puts a PostgreSQL transaction in psycopg's pipeline mode:
        BEGIN, submitted statements, inserts and COMMIT are sent together and
        only a result read waits for the server (see :class:`Submitted`).

        ``defer_flush`` makes a SQLite file store commit without waiting for its
        fsync (``synchronous=NORMAL`` for this transaction). The commit survives a
        killed process at once, and a power loss once the next flushed commit
        has synced the WAL, which holds every earlier commit in order. SQLite
        fixes the level before BEGIN, so the choice cannot depend on what the
        transaction reads: a caller that finds it needed the flush after all
        follows with a flushed write (RunStore.claim_and_load). PostgreSQL
        transactions always wait for their flush (RunStore.claim_and_load says why).
        """
        if pipelined and self.dialect_name == "postgresql":
            with self._pipelined_transaction() as tx:
                yield tx
            return
        begin = "BEGIN IMMEDIATE" if self.dialect_name == "sqlite" else "BEGIN"
        deferred = defer_flush and self.defers_flush
        with self._file_writers or nullcontext(), self._connection() as raw:
            cursor = raw.cursor()
            try:
                if deferred:
                    cursor.execute("PRAGMA synchronous=NORMAL")
                cursor.execute(begin)
                try:
                    yield Transaction(self, cursor)
                except BaseException:
                    _rollback_quietly(cursor)
                    raise
                cursor.execute("COMMIT")
            finally:
                try:
                    if deferred:
                        if (
                            raw.driver_connection.in_transaction
                        ):  # COMMIT failed: the level cannot change mid-transaction
                            _rollback_quietly(cursor)
                        cursor.execute(f"PRAGMA synchronous={self._synchronous}")
                finally:
                    cursor.close()

    @contextmanager
    def _pipelined_transaction(self) -> Iterator[Transaction]:
        """A PostgreSQL transaction in pipeline mode; COMMIT goes out with the last statements.

        An error, raised by our code or by the server at a sync (the server then
        skips the rest of the pipeline, COMMIT included), leaves the pipeline and
        rolls back on the connection in normal mode.
        """
        with self._connection() as raw:
            cursor = raw.cursor()
            try:
                try:
                    with raw.driver_connection.pipeline() as pipeline:
                        cursor.execute("BEGIN")
                        tx = Transaction(self, cursor, pipeline)
                        try:
                            yield tx
                            cursor.execute("COMMIT")
                        finally:
                            tx.pipeline_closing()
                except BaseException:
                    _rollback_quietly(cursor)
                    raise
            finally:
                cursor.close()

    @contextmanager
    def reader(self) -> Iterator[Transaction]:
        """Reads outside a write transaction, in autocommit: each statement has its own snapshot.

        A read that needs several rows to agree must get them from one statement
        (as ``load_session`` and ``claim_and_load`` do) or run in ``transaction()``.
        """
        with self._connection() as raw:
            cursor = raw.cursor()
            try:
                yield Transaction(self, cursor)
            finally:
                cursor.close()

    def dispose(self) -> None:
        """Close every connection, once the statements running on them have finished.

        Another thread still using the store (e.g. an event follower of a run)
        gets a StoreClosedError from its next statement. A SQLite statement still
        running after ``DISPOSE_WAIT_SECONDS`` is interrupted (sqlite3's interrupt is
        safe from another thread) and waited for again; a connection is never closed
        under a running statement, which can crash the process.
        """
        with self._users:
            self._disposed = True
        if not self._users_left(DISPOSE_WAIT_SECONDS):
            self._interrupt_sqlite_statements()
            if not self._users_left(DISPOSE_WAIT_SECONDS):
                log.warning(
                    "run store %s closed with statements still running; their connections stay open", safe_url(self.url)
                )
                return
        for raw in list(self._opened.values()):
            try:
                raw.close()
            except Exception:  # noqa: BLE001 - closing other threads' connections is best effort
                pass
        self._opened.clear()
        self.engine.dispose()

    def _users_left(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for every use of a connection to end; True when none is left."""
        deadline = time.monotonic() + seconds
        while self._in_use and time.monotonic() < deadline:  # closing is rare: polling keeps every use cheap
            time.sleep(0.005)
        return not self._in_use

    def _interrupt_sqlite_statements(self) -> None:
        """Abort the statements running on this store's SQLite connections (they raise in their threads)."""
        for raw in list(self._opened.values()):
            connection = getattr(raw, "driver_connection", None)
            try:
                if connection is not None:
                    connection.interrupt()
            except Exception:  # noqa: BLE001 - a connection closed meanwhile has nothing to interrupt
                pass


def _switch_to_wal(cursor: Any) -> None:
    """Put the SQLite file in WAL mode (it stays so), waiting out other openers doing the same.

    SQLite answers a journal-mode change that meets another connection's lock
    with "database is locked" at once, without its busy handler: processes that
    open a new store together (a worker and a web app started at once) lost
    that race about one time in twelve. Retried like any transient error: once
    one of them has switched the file, the others' switch is a no-op.
    """
    retry_transient(cursor.execute)("PRAGMA journal_mode=WAL")


def _rollback_quietly(cursor: Any) -> None:
    """Roll back after an error; a failing ROLLBACK (a dropped connection) must not hide that error.

    A connection whose ROLLBACK failed is still inside its transaction, so
    ``_postgres_connection`` cannot switch it out of autocommit and discards it.
    """
    try:
        cursor.execute("ROLLBACK")
    except Exception:  # noqa: BLE001 - the original error is the one worth raising
        pass


class _ThreadConnection:
    """One thread's SQLite connection, given back to the pool when the thread ends.

    It lives in a ``threading.local``, which drops it when its thread exits, so
    short-lived threads (a run started on a thread) do not leak connections.
    """

    __slots__ = ("raw", "_opened")

    def __init__(self, raw: Any, opened: dict[int, Any]) -> None:
        self.raw = raw
        self._opened = opened
        opened[id(raw)] = raw

    def __del__(self) -> None:
        if self._opened.pop(id(self.raw), None) is not None:
            try:
                self.raw.close()
            except Exception:  # noqa: BLE001 - best effort at thread exit
                pass


__all__ = ["DEFAULT_POOL_SIZE", "POSTGRES_CONNECT_TIMEOUT", "Database", "StoreClosedError"]
