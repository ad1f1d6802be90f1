"""Connections, transactions and compiled statements for the run store.

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

Transient errors (SQLite "database is locked", PostgreSQL serialization
failures, deadlocks and dropped connections) are retried by one decorator,
:func:`retry_transient`, around whole transactions and reads.
"""

from __future__ import annotations

import functools
import operator
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from lg_core.errors import ConfigurationError, RunStateError, StoreUnavailableError
from lg_core.urls import safe_url

T = TypeVar("T")
# A database that cannot be reached now: the server is down, restarting, recovering or failing
# over, or the connection to it was dropped. A call still failing so after its retries raises
# StoreUnavailableError.
_UNREACHABLE_MARKERS = (
    "server closed the connection",
    "connection already closed",
    "terminating connection",
    "connection refused",
    "connection timeout expired",  # libpq's connect_timeout: a server or network that does not answer
    "no route to host",
    "network is unreachable",
    # psycopg 3 on a connection the server dropped (restart, pg_terminate_backend, idle timeout)
    "the connection is closed",
    "the connection is lost",
    "connection reset by peer",
    "could not receive data from server",
    # PostgreSQL refusing connections while it starts, recovers from a crash or shuts down (57P03)
    "the database system is",
    # libpq's whole message when the server answers its SSL request with an error: a backend
    # forked as the postmaster died says "terminating connection due to unexpected postmaster
    # exit" there (seen when PostgreSQL crashed under a reader that was connecting)
    "error response during ssl exchange",
)
# Contention that a second try of the whole transaction resolves.
_CONTENTION_MARKERS = (
    "database is locked",
    "database table is locked",
    "could not serialize access",
    "deadlock detected",
    # a lost race on a computed key (e.g. the next interjection number): retrying re-reads it
    "unique constraint failed",
    "duplicate key value",
)
RETRIES = 12  # tries of one call; with the pauses below, about 4-9 s in all


def is_unreachable(exc: BaseException) -> bool:
    """Is ``exc`` the database being out of reach (as opposed to busy, or refusing the statement)?"""
    if isinstance(exc, StoreUnavailableError):
        return True
    text = str(exc).lower()
    return any(marker in text for marker in _UNREACHABLE_MARKERS)


def is_transient(exc: BaseException) -> bool:
    """Would the same call succeed if tried again a little later?"""
    if is_unreachable(exc):
        return True
    text = str(exc).lower()
    return any(marker in text for marker in _CONTENTION_MARKERS)


def retry_transient(fn: Callable[..., T]) -> Callable[..., T]:
    """Retry a whole transaction on transient database errors (jittered backoff).

    When the database is still out of reach after the last try, the call raises
    StoreUnavailableError (the driver's error as its ``__cause__``): one class
    for callers to catch whichever driver the store uses, SQLAlchemy's or
    psycopg's own. A StoreUnavailableError from a call inside this one is not
    tried again: that call has spent its retries already.
    """

    # Hand-written, not tenacity: this wraps every store transaction, and a tenacity Retrying
    # costs about 18 µs per call where this loop costs 0.2 µs when the first try succeeds.

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        started = time.monotonic()
        delay = 0.005
        for attempt in range(RETRIES):
            try:
                return fn(*args, **kwargs)
            except StoreUnavailableError:
                raise
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if attempt == RETRIES - 1:
                    if is_unreachable(exc):
                        raise _unavailable(exc, time.monotonic() - started) from exc
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    return wrapper


def driver_reason(exc: BaseException) -> str:
    """The database driver's message for ``exc`` on one line (libpq's spans several, with hints)."""
    return " ".join(str(getattr(exc, "orig", None) or exc).split())


def _unavailable(exc: Exception, seconds: float) -> StoreUnavailableError:
    reason = driver_reason(exc)
    return StoreUnavailableError(
        f"the store's database could not be reached for {seconds:.1f} s ({RETRIES} tries); nothing stored "
        f"was lost, and the same call works again once the database is back. The driver said: {reason}"
    )


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

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> Any:
        prepared = self._db.prepared(name)
        self.cursor.execute(prepared.sql, prepared.bind(params or {}))
        if self._pipeline is not None:
            self._synced()  # callers read rowcount or rows right away
        return self.cursor

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


def parse_store_url(url: str, message: str, error: type[Exception] = ConfigurationError) -> Any:
    """``url`` parsed by SQLAlchemy, else ``error(message)``.

    ``message`` is formatted with ``url`` (its password hidden) and ``reason``:
    SQLAlchemy refuses a URL it cannot split with ArgumentError, but a port that
    is not a number (``host:abc``, an unclosed ``[::1``) escapes as ValueError.
    """
    try:
        return make_url(url)
    except ArgumentError:
        reason = ""
    except ValueError:
        reason = " (its port is not a number)"
    raise error(message.format(url=safe_url(url), reason=reason)) from None


def _unsupported_store(url: str, dialect: str) -> str:
    """Why ``url`` cannot be a run store, with the URL to write instead."""
    if dialect == "postgres":  # Heroku-style URLs: SQLAlchemy knows only the postgresql scheme
        return (
            f"run_store {safe_url(url)} uses the scheme postgres://, which SQLAlchemy does not accept; "
            "write it as postgresql+psycopg://user@host/db"
        )
    return (
        f"run_store supports SQLite and PostgreSQL, got {dialect!r} ({safe_url(url)}); use "
        "'sqlite:///path/to/runs.db' or 'postgresql+psycopg://user@host/db'"
    )


def expand_sqlite_home(url: str) -> str:
    """``url`` with a ``~`` (or ``~user``) at the start of its SQLite file path expanded, as a shell
    would: SQLite itself opens ``~/runs.db`` as a directory named ``~``. Any other URL is returned as is
    (a ``?uri=true`` path is SQLite's own to read)."""
    import os

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return url  # not a URL: whoever opens it says so
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or not database.startswith("~") or "uri" in parsed.query:
        return url
    expanded = os.path.expanduser(database)
    return url if expanded == database else parsed.set(database=expanded).render_as_string(hide_password=False)


def _check_sqlite_path(url: str, database: str) -> str:
    """A SQLite file store in a missing directory (or at a directory) is a ConfigurationError that
    says so, not SQLite's "unable to open database file" when the first connection opens.

    Returns the URL for SQLite to open: ``url`` with ``~`` expanded, the path checked here."""
    from pathlib import Path

    path = Path(database).expanduser()
    if path.is_dir():
        raise ConfigurationError(
            f"cannot open the run store {url}: {path} is a directory; name a file in it, e.g. sqlite:///{path / 'runs.db'}"
        )
    if not path.parent.is_dir():
        raise ConfigurationError(
            f"cannot open the run store {url}: the directory {path.parent} does not exist; create it "
            "(SQLite creates only the file) or fix the path"
        )
    return expand_sqlite_home(url)


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
        self.dialect_name = parsed.get_backend_name()
        if self.dialect_name not in ("sqlite", "postgresql"):
            raise ConfigurationError(_unsupported_store(url, self.dialect_name))
        self.in_memory = self.dialect_name == "sqlite" and parsed.database in (None, "", ":memory:")
        opened = url
        if self.dialect_name == "sqlite" and not self.in_memory and "uri" not in parsed.query:
            opened = _check_sqlite_path(url, parsed.database)  # with ~ expanded, as the check read it
        self._synchronous = synchronous.upper()
        if self._synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigurationError(f"sqlite_synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        self.engine = self._create_engine(opened, pool_size)
        self._builders = dict(statements)
        self._prepared: dict[str, Prepared] = {}
        self._lock = threading.RLock() if self.in_memory else None
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
        with self._connection() as raw:
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
                        if raw.driver_connection.in_transaction:  # COMMIT failed: the level cannot change mid-transaction
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
        gets a StoreClosedError from its next statement. A statement that has
        not finished after ``DISPOSE_WAIT_SECONDS`` is not waited for longer.
        """
        with self._users:
            self._disposed = True
        deadline = time.monotonic() + DISPOSE_WAIT_SECONDS
        while self._in_use and time.monotonic() < deadline:  # closing is rare: polling keeps every use cheap
            time.sleep(0.005)
        for raw in list(self._opened.values()):
            try:
                raw.close()
            except Exception:  # noqa: BLE001 - closing other threads' connections is best effort
                pass
        self._opened.clear()
        self.engine.dispose()


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


__all__ = [
    "Database",
    "Prepared",
    "StoreClosedError",
    "Submitted",
    "Transaction",
    "driver_reason",
    "is_transient",
    "is_unreachable",
    "retry_transient",
]
