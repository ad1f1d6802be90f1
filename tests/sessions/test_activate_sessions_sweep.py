"""The scheduler's stalled-session sweep counts the runs it started, not the sessions it looked at.

Two schedulers (two runtimes on one SQLite file or PostgreSQL database) both
list the same stalled sessions before either activates one; for each session
one of them starts its next run and the other finds it running and starts
nothing. The counts they return add up to the runs started, and each equals
the runs its own sweep published.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from lg_core import Configuration
from lg_core.store import NewStep, RunStore
from lg_scheduler.recovery import activate_sessions
from tests.engine.numbered_tool import RecordingPublisher

SESSIONS = ("conv-1", "conv-2", "conv-3")


@pytest.fixture
def url(durable_url) -> str:
    return durable_url


@pytest.fixture
def runtimes(url) -> Iterator[list]:
    configurations = [Configuration(run_store=url) for _ in range(2)]
    yield [configuration.runtime() for configuration in configurations]
    for configuration in configurations:
        configuration.close()


def _create(store: RunStore, run_id: str, session_id: str) -> str:
    """A distributed run (no holder) of ``session_id``; pending while another run of the session is open."""
    return store.create_run(
        {
            "id": run_id,
            "entrypoint": "app:Agent",
            "kind": "agent",
            "status": "running",
            "invocation": {"message": "hi"},
            "session_id": session_id,
            "actor_id": "user-7",
            "holder": None,
            "deadline_at": None,
        },
        {
            "id": f"{run_id}/root",
            "run_id": run_id,
            "path": "root",
            "kind": "agent",
            "entrypoint": "app:Agent",
            "version": 0,
            "checkpoint": {"phase": "opening"},
        },
        [],
        [("invocation_start", {"run_id": run_id})],
        [NewStep(key="root/turn-0/model", frame_id=f"{run_id}/root", kind="model")],
        serialize=True,
    )


def _stall(store: RunStore) -> None:
    """Each session's running run ends outside any commit (an old process, a crash): its next run waits on."""
    for session_id in SESSIONS:
        assert [_create(store, f"{session_id}-a", session_id), _create(store, f"{session_id}-b", session_id)] == [
            "running",
            "pending",
        ]
    with store.db.engine.begin() as conn:
        conn.execute(text("UPDATE lg_runs SET status = 'failed' WHERE id LIKE :ended"), {"ended": "%-a"})
    assert sorted(session for session, _actor in store.stalled_sessions()) == list(SESSIONS)


def _list_together(runtimes: list) -> None:
    """Each runtime's sweep lists the stalled sessions, then waits until the other one listed them too."""
    barrier = threading.Barrier(len(runtimes))
    for runtime in runtimes:
        listed = runtime.store.stalled_sessions

        def stalled_sessions(limit: int = 100, listed=listed):
            sessions = listed(limit)
            barrier.wait(timeout=30)
            return sessions

        runtime.store.stalled_sessions = stalled_sessions


def test_two_sweeps_at_once_count_each_started_run_once(runtimes):
    _stall(runtimes[0].store)
    _list_together(runtimes)
    publishers = [RecordingPublisher() for _ in runtimes]
    counts: list[int] = [0] * len(runtimes)
    errors: list[BaseException] = []

    def sweep(index: int) -> None:
        try:
            counts[index] = activate_sessions(runtimes[index].engine, publishers[index])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=sweep, args=(i,)) for i in range(len(runtimes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    published = [sorted(ref.run_id for ref in publisher.sent) for publisher in publishers]
    assert sorted(run_id for part in published for run_id in part) == [f"{s}-b" for s in SESSIONS]
    assert counts == [len(part) for part in published]  # each sweep counts exactly what it started
    assert sum(counts) == len(SESSIONS)
    store = runtimes[0].store
    assert [store.load_run(f"{s}-b").status for s in SESSIONS] == ["running"] * len(SESSIONS)


def test_a_sweep_that_finds_the_session_already_running_counts_nothing(runtimes):
    store = runtimes[0].store
    _stall(store)
    listed = store.stalled_sessions()
    for session_id, actor_id in listed:  # another scheduler got there between the listing and the activation
        assert runtimes[1].engine.activate_next_pending(session_id, actor_id).runs == (f"{session_id}-b",)
    store.stalled_sessions = lambda limit=100: listed

    publisher = RecordingPublisher()
    assert activate_sessions(runtimes[0].engine, publisher) == 0
    assert publisher.sent == []
