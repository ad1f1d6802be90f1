"""Closing a run store while another thread still uses it.

A runtime closes its store when the application (or a test) is done with it,
while a daemon thread (an event follower, a heartbeat) may still be in a
statement. Closing a SQLite connection under a running statement can crash
the interpreter; the close must wait for the statement, and the thread's next
use must get a clear error instead of a closed (or, in memory, an empty new)
database.
"""

from __future__ import annotations

import threading

import pytest

from lg_core.errors import RunStateError
from lg_core.store import RunStore, database
from lg_core.store.database import StoreClosedError

# About a second of SQLite work, long enough for close() to arrive in the middle of it.
SLOW_COUNT = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) SELECT count(*) FROM c"
# Minutes of SQLite work: only an interrupt ends it within the test.
ENDLESS_COUNT = SLOW_COUNT.replace("3000000", "3000000000")


@pytest.fixture(params=["memory", "file"])
def store(request, tmp_path):
    url = "sqlite://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    store = RunStore(url)
    yield store
    store.close()


def test_close_waits_for_a_running_statement_and_later_use_is_a_clear_error(store):
    started, order, failures = threading.Event(), [], []

    def reader() -> None:
        with store.db.reader() as tx:
            started.set()
            order.append(("counted", tx.cursor.execute(SLOW_COUNT).fetchone()[0]))
        try:
            store.list_runs()
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            failures.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    assert started.wait(30)
    store.close()
    order.append(("closed", None))
    thread.join(30)

    assert order == [("counted", 3000000), ("closed", None)]
    [failure] = failures
    assert isinstance(failure, StoreClosedError) and isinstance(failure, RunStateError)
    assert "is closed" in str(failure)


def test_a_statement_outlasting_the_wait_is_interrupted_not_closed_under(store, monkeypatch):
    """Past the wait, the running SQLite statement is interrupted and its thread gets an error;
    closing the connection under it instead could crash the interpreter."""
    monkeypatch.setattr(database, "DISPOSE_WAIT_SECONDS", 0.2)
    started, errors = threading.Event(), []

    def reader() -> None:
        try:
            with store.db.reader() as tx:
                started.set()
                tx.cursor.execute(ENDLESS_COUNT).fetchone()
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    assert started.wait(30)
    store.close()
    thread.join(30)

    assert not thread.is_alive()
    [error] = errors
    assert "interrupted" in str(error)


def test_closing_twice_is_harmless(store):
    store.close()
    store.close()

    with pytest.raises(StoreClosedError):
        store.load_run("any")
