"""The run store's batch API on SQLite and PostgreSQL, and SQLite under many short-lived threads."""

from __future__ import annotations

import gc
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from lg_core import Configuration, with_configuration
from lg_core.store import RunStore
from lg_core.store.statements import STATUS_CHUNK
from tests.batch.batch_app import ItemAgent


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    store = RunStore(url)
    yield store
    store.close()


def batch_row(batch_id: str = "b1", holder: str = "me") -> dict:
    return {
        "id": batch_id,
        "agent": "app:Agent",
        "input_hash": "ab" * 32,
        "input_path": "/in.jsonl",
        "total": 3,
        "holder": holder,
    }


def test_open_claim_update_and_list(store):
    record, created = store.open_batch(batch_row())
    assert created and (record.status, record.total, record.done, record.holder) == ("running", 3, 0, "me")
    again, created = store.open_batch(batch_row(holder="someone else"))
    assert not created and again.holder == "me" and again.created_at == record.created_at

    assert store.update_batch("b1", "me", {"completed": 1, "failed": 1, "running": 1})
    assert not store.update_batch("b1", "not the holder", {"completed": 3})
    assert not store.claim_batch("b1", "you", previous="not the holder", total=3)
    assert store.claim_batch("b1", "you", previous="me", total=3)
    assert not store.update_batch("b1", "me", {"completed": 3})  # the old holder lost it

    assert store.update_batch("b1", "you", {"completed": 2, "failed": 1}, finished=True)
    final = store.load_batch("b1")
    assert (final.status, final.completed, final.failed, final.running, final.holder) == ("finished", 2, 1, 0, None)
    assert final.done == 3 and final.finished_at is not None
    store.open_batch(batch_row("b2"))
    assert [b.id for b in store.list_batches()] == ["b2", "b1"]
    assert store.load_batch("missing") is None


def test_releasing_a_batch_keeps_it_running_without_a_holder(store):
    store.open_batch(batch_row())
    assert store.update_batch("b1", "me", {"completed": 1}, release=True)
    record = store.load_batch("b1")
    assert (record.status, record.holder, record.completed) == ("running", None, 1)
    assert store.claim_batch("b1", "next", previous=None, total=3)


def test_run_statuses_reads_any_number_of_ids(store):
    ids = [f"r{n}" for n in range(STATUS_CHUNK * 2 + 3)]
    present = ids[::3]
    configuration = Configuration(run_store=store.url)
    with with_configuration(configuration):
        for run_id in present:
            ItemAgent.ask("hello", run_id=run_id)
    configuration.close()

    found = store.run_statuses([*ids, *present])  # duplicates and a short last chunk
    assert set(found) == set(present)
    assert {status for status, _holder in found.values()} == {"completed"}
    assert store.run_statuses([]) == {}


def test_run_outcomes_reads_how_runs_ended_for_any_number_of_ids(store):
    """What a batch writes as result lines, 16 runs a statement, without the invocations."""
    ids = [f"r{n}" for n in range(STATUS_CHUNK + 3)]
    present = ids[::2]
    configuration = Configuration(run_store=store.url)
    with with_configuration(configuration):
        for run_id in present:
            ItemAgent.ask("explode" if run_id == "r0" else f"hello {run_id}", run_id=run_id)
    configuration.close()

    outcomes = store.run_outcomes([*ids, *present])  # duplicates and a short last chunk

    assert set(outcomes) == set(present)
    for run_id in present:
        record, outcome = store.load_run(run_id), outcomes[run_id]
        assert (outcome.id, outcome.status, outcome.response, outcome.error, outcome.usage, outcome.result) == (
            record.id,
            record.status,
            record.response,
            record.error,
            record.usage,
            record.result,
        )
    assert outcomes["r2"].status == "completed" and outcomes["r2"].response == "done: hello r2"
    assert outcomes["r0"].status == "failed" and "exploded" in outcomes["r0"].error["message"]
    assert store.run_outcomes([]) == {}


def test_a_sqlite_file_store_serves_many_short_lived_threads(tmp_path):
    """Each thread has its own connection, returned when the thread ends (runs on threads need this)."""
    database = tmp_path / "runs.db"
    store = RunStore(f"sqlite:///{database}")
    store.open_batch(batch_row())
    failures: list[BaseException] = []

    def read(barrier: threading.Barrier | None = None) -> None:
        try:
            if barrier is not None:
                barrier.wait()
            assert store.load_batch("b1") is not None
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    for _ in range(40):  # one after another: more threads than the pool has connections
        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
    barrier = threading.Barrier(30)
    threads = [threading.Thread(target=read, args=(barrier,)) for _ in range(30)]  # all alive at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # A thread's connection goes back to the pool as its thread state is torn down, which can
    # trail join() by a moment; the pool keeps five and closes the rest.
    deadline = time.monotonic() + 60
    while len(open_connections(database)) > 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    left_open = len(open_connections(database))
    store.close()
    assert failures == []
    assert left_open <= 6  # the pool's five plus this thread's; none left behind by the 70 threads


def open_connections(database: Path) -> list[sqlite3.Connection]:
    """Open sqlite3 connections of this process to ``database`` (file descriptors would mislead:
    SQLite parks a closed connection's descriptor while other connections hold locks)."""
    found = []
    for obj in gc.get_objects():
        if isinstance(obj, sqlite3.Connection):
            try:
                files = [row[2] for row in obj.execute("PRAGMA database_list")]
            except sqlite3.ProgrammingError:
                continue  # closed
            if str(database) in files:
                found.append(obj)
    return found
