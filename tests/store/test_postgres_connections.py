"""How the run store uses PostgreSQL connections, on the real server the suite starts.

The store checks out pooled connections without a liveness ping (a round trip
per checkout), so a connection the server dropped while it sat in the pool
must be replaced by the retry of the call that drew it.
"""

from __future__ import annotations

import logging
import threading
import uuid

import psycopg
import pytest
from test_store_conformance import _commit, _create  # this folder is on sys.path (no __init__.py)

from lg_core.errors import ConfigurationError
from lg_core.store import RunStore
from lg_core.store.database import DEFAULT_POOL_SIZE, Database
from lg_core.store.statements import STATEMENTS


@pytest.fixture
def pg_store(pg_url):
    store = RunStore(pg_url)
    yield store
    store.close()


def _terminate_other_backends(pg_url: str) -> int:
    """End every other session on the test's database, as a server restart or an admin would."""
    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def _fill_pool(store: RunStore, connections: int) -> None:
    """Leave ``connections`` idle connections in the store's pool (checked out at once, then returned)."""
    opened = [store.db.engine.raw_connection() for _ in range(connections)]
    for raw in opened:
        raw.cursor().execute("SELECT 1")
        raw.rollback()
    for raw in opened:
        raw.close()


def test_reads_and_writes_survive_connections_dropped_between_uses(pg_store, pg_url):
    _create(pg_store)
    _fill_pool(pg_store, 4)
    assert _terminate_other_backends(pg_url) >= 4
    assert pg_store.load_run("r1").status == "running"  # a read on a dead pooled connection
    _fill_pool(pg_store, 4)
    _terminate_other_backends(pg_url)
    assert pg_store.commit(_commit()).applied  # a write transaction on a dead pooled connection
    assert pg_store.load_frame("r1/root").version == 1


def test_one_drop_recycles_the_pool_at_once(pg_store, pg_url, caplog):
    """The first disconnect invalidates every older pooled connection: no retry draws another dead one.

    A dead connection given back to the pool fails the pool's reset and is
    logged; connections recycled by the invalidation are closed quietly.
    """
    _create(pg_store)
    _fill_pool(pg_store, 5)
    _terminate_other_backends(pg_url)
    with caplog.at_level("ERROR", logger="sqlalchemy.pool"):
        assert pg_store.load_run("r1").status == "running"
        _fill_pool(pg_store, 5)  # five live connections: the dead ones were replaced, not drawn
    assert [r.getMessage() for r in caplog.records if r.name.startswith("sqlalchemy.pool")] == []


def _backends_of_a_burst(store: RunStore, threads: int) -> set[int]:
    """``threads`` threads each use a store connection at the same moment; the server backends they used."""
    barrier = threading.Barrier(threads, timeout=30)
    backends: set[int] = set()

    def use_a_connection() -> None:
        with store.db.reader() as tx:
            tx.cursor.execute("SELECT pg_backend_pid()")
            backends.add(tx.cursor.fetchone()[0])
            barrier.wait()  # every thread holds its connection here at once

    workers = [threading.Thread(target=use_a_connection) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert len(backends) == threads
    return backends


def test_a_burst_of_concurrent_steps_reuses_the_connections_of_the_last_one(pg_store):
    """A worker's threads come and go in bursts: the connections a burst opened stay open for the next.

    With a small pool and overflow, every connection beyond the pool's size
    was closed when it was returned, and the next burst opened a new server
    session for each (a fork and an authentication on the server every time).
    """
    burst = min(DEFAULT_POOL_SIZE, 25)
    assert burst > 10  # beyond a 10-connection pool, whose overflow would be closed on return
    first = _backends_of_a_burst(pg_store, burst)
    assert _backends_of_a_burst(pg_store, burst) == first


def test_store_pool_size_bounds_the_connections_and_more_threads_wait_their_turn(pg_url, monkeypatch):
    """LG_STORE_POOL_SIZE=3: six threads each holding a connection for a moment share three backends."""
    from lg_core.config import build_configuration

    monkeypatch.setenv("LG_RUN_STORE", pg_url)
    monkeypatch.setenv("LG_STORE_POOL_SIZE", "3")
    configuration = build_configuration()
    try:
        store = configuration.runtime().store
        backends: list[int] = []

        def hold_a_connection() -> None:
            with store.db.reader() as tx:
                tx.cursor.execute("SELECT pg_backend_pid(), pg_sleep(0.2)")
                backends.append(tx.cursor.fetchone()[0])

        threads = [threading.Thread(target=hold_a_connection) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(backends) == 6  # every thread got its turn
        assert len(set(backends)) <= 3
    finally:
        configuration.close()


def _in_transaction(tx) -> bool:
    return tx.cursor.connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


def test_reads_open_no_transaction_and_writes_do(pg_store):
    """A read is its statement alone (no BEGIN ... ROLLBACK round trips); a write is one transaction."""
    _create(pg_store)
    with pg_store.db.reader() as tx:
        assert tx.fetchone("select_run_flags", {"run_id": "r1"})[0] == "running"
        assert not _in_transaction(tx)
    with pg_store.db.transaction() as tx:
        tx.fetchone("select_run_flags", {"run_id": "r1"})
        assert _in_transaction(tx)


def test_a_failed_write_transaction_leaves_nothing_and_the_connection_usable(pg_store):
    _create(pg_store)
    with pytest.raises(RuntimeError, match="boom"), pg_store.db.transaction() as tx:
        tx.execute("request_cancel", {"run_id": "r1", "now": 1.0})
        raise RuntimeError("boom")
    assert pg_store.load_run("r1").cancel_requested is False
    assert pg_store.request_cancel("r1") and pg_store.load_run("r1").cancel_requested is True


def test_the_engine_keeps_transactions_for_sqlalchemy_users(pg_store):
    """Connections go back to the pool out of autocommit: a Core transaction (migrations) still rolls back."""
    from sqlalchemy import text

    _create(pg_store)
    pg_store.load_run("r1")
    with pg_store.db.engine.connect() as connection:
        assert connection.connection.driver_connection.autocommit is False
        with connection.begin() as txn:
            connection.execute(text("UPDATE lg_runs SET cancel_requested = 1 WHERE id = 'r1'"))
            txn.rollback()
    assert pg_store.load_run("r1").cancel_requested is False


def test_a_database_not_encoded_utf8_is_refused_with_the_fix(postgres):
    """A SQL_ASCII database (initdb's choice where no UTF-8 locale is set) gives a ConfigurationError naming UTF8.

    Without the check the first connection failed inside SQLAlchemy with
    "cannot use a string pattern on a bytes-like object", in every process.
    """
    name = f"lg_ascii_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres.url().replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    with pytest.raises(ConfigurationError, match=r"encoded SQL_ASCII; .* needs UTF8: create the database with"):
        store = RunStore(postgres.url(name))
        try:
            store.load_run("r1")
        finally:
            store.close()
    database = Database(postgres.url(name), statements=STATEMENTS)
    try:
        for _ in range(2):  # every connection attempt of one engine, not only its first
            with pytest.raises(ConfigurationError, match="encoded SQL_ASCII"), database.reader() as tx:
                tx.fetchone("select_run_flags", {"run_id": "r1"})
    finally:
        database.dispose()


def test_a_connection_whose_pipeline_failed_is_not_reused_with_a_statement_the_server_never_prepared(pg_store):
    """psycopg prepares a statement the sixth time a connection runs it, and records it as prepared
    when it sends it; in a pipeline that an error aborted, the server skipped that prepare. Reused,
    the connection then failed every later run of the statement ("prepared statement ... does not
    exist"): a step's commit failed on every attempt (300 parallel tool calls on one turn did it)."""
    db = pg_store.db
    statement = "SELECT %s::int + 1"
    for _ in range(2):  # earlier lost races: psycopg resets its records at a connection's first ROLLBACK only
        _abort_a_pipeline(db)
    for value in range(5):  # one pooled connection, used in turn: the statement is not prepared yet
        with db.reader() as tx:
            assert tx.cursor.execute(statement, (value,)).fetchone() == (value + 1,)
    _abort_a_pipeline(db, then=(statement, (5,)))  # the sixth run: psycopg sends its prepare and records it
    with db.reader() as tx:
        assert tx.cursor.execute(statement, (6,)).fetchone() == (7,)
    with db.transaction(pipelined=True) as tx:
        assert tx.cursor.execute(statement, (7,)).fetchone() == (8,)


def _abort_a_pipeline(db: Database, then: tuple[str, tuple[int]] | None = None) -> None:
    """A pipelined transaction whose first statement fails, as a commit that lost a race does;
    ``then`` is sent after it."""
    with pytest.raises(psycopg.errors.DivisionByZero), db.transaction(pipelined=True) as tx:
        tx.cursor.execute("SELECT 1 / %s::int", (0,))  # aborts the pipeline: the server skips what follows
        if then is not None:
            tx.cursor.execute(*then)


def test_a_lost_race_in_a_pipeline_logs_no_psycopg_warning(pg_store, caplog):
    """psycopg warned "error ignored terminating <Pipeline>: pipeline aborted" for every commit that
    lost a race, and a process without logging set up printed it on stderr."""
    with caplog.at_level(logging.WARNING, logger="psycopg"):
        with pytest.raises(psycopg.errors.DivisionByZero), pg_store.db.transaction(pipelined=True) as tx:
            tx.cursor.execute("SELECT 1 / %s::int", (0,))
            tx.cursor.execute("SELECT %s::int + 1", (1,))
            tx.sync()  # the store reads a guard's result before it goes on: the error surfaces here
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []


@pytest.mark.parametrize("contended", [True, False])
def test_a_contended_commit_that_loses_its_race_keeps_its_connection(pg_store, contended):
    """Parallel tool calls commit to one frame and all but one lose. Such a commit (``contended``)
    reads its guards before writing, so losing rolls back on the client; made at once, the guard
    fails on the server and the connection is closed (one reconnect and one server ERROR each)."""
    from dataclasses import replace

    from sqlalchemy import event

    _create(pg_store, steps=("root/turn-0/tool/a", "root/turn-0/tool/b"))
    invalidated: list[BaseException | None] = []
    event.listen(pg_store.db.engine.pool, "invalidate", lambda _raw, _record, exc: invalidated.append(exc))
    first = replace(_commit(key="root/turn-0/tool/a"), contended=contended)
    second = replace(_commit(key="root/turn-0/tool/b"), contended=contended)
    assert pg_store.commit(first).applied
    lost = pg_store.commit(second)
    assert (lost.applied, lost.reason) == (False, "frame_version_conflict")
    assert (invalidated == []) is contended
    assert pg_store.commit(replace(_commit(version=1, key="root/turn-0/tool/b"), contended=contended)).applied
    assert [s.status for s in pg_store.load_steps("r1", prefix="root/turn-0/tool/")] == ["succeeded", "succeeded"]
