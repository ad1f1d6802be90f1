"""The run store's side of session serialization, on SQLite (memory, file) and PostgreSQL:
who runs, who waits, and who is activated when a run ends, decided in the database."""

from __future__ import annotations

import threading

import pytest

from lg_core.messages import Message
from lg_core.store import NewStep, RunFinish, RunStore, StepCommit, StepRecord
from lg_core.store.records import SessionWrite


@pytest.fixture(params=["memory", "file", "postgres"])
def store(request, tmp_path):
    url = {"memory": "sqlite://", "file": f"sqlite:///{tmp_path / 'runs.db'}"}.get(request.param)
    opened = RunStore(url or request.getfixturevalue("pg_url"))
    yield opened
    opened.close()


def create(
    store: RunStore, run_id: str, session_id: str = "conv-1", actor_id: str | None = "user-7", holder=None
) -> str:
    return store.create_run(
        {
            "id": run_id,
            "entrypoint": "app:Agent",
            "kind": "agent",
            "status": "running",
            "invocation": {"message": "hi"},
            "session_id": session_id,
            "actor_id": actor_id,
            "holder": holder,
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


def finish(store: RunStore, run_id: str, session: SessionWrite | None = None):
    return store.commit(
        StepCommit(
            run_id=run_id,
            frame_id=f"{run_id}/root",
            expected_version=0,
            checkpoint={"phase": "done"},
            step_key="root/turn-0/model",
            events=[("run_stop", {})],
            finish=RunFinish("completed", "ok", None, {}, None),
            session=session,
        )
    )


def statuses(store: RunStore, *run_ids: str) -> list[tuple[str, str]]:
    return [(store.load_run(r).status, _first_turn(store, r).status) for r in run_ids]


def _first_turn(store: RunStore, run_id: str) -> StepRecord:
    step = store.load_step(run_id, "root/turn-0/model")
    assert step is not None, f"run {run_id} has no first model turn"
    return step


def test_a_run_waits_while_its_session_has_a_running_or_waiting_run(store):
    assert [create(store, "a"), create(store, "b"), create(store, "c")] == ["running", "pending", "pending"]
    assert create(store, "other-session", session_id="conv-2") == "running"
    assert create(store, "other-actor", actor_id="user-8") == "running"
    assert create(store, "no-actor", actor_id=None) == "running"
    assert statuses(store, "a", "b") == [("running", "scheduled"), ("pending", "pending")]
    assert [s.key for s in store.load_steps("b", open_only=True)] == []  # not in the outbox


def test_the_commit_that_ends_a_run_activates_the_oldest_waiting_run_only(store):
    create(store, "a")
    create(store, "b", holder="host:1:2")
    create(store, "c")

    result = finish(store, "a")

    assert result.applied
    [activated] = result.activated
    assert (activated.run_id, activated.holder, activated.steps) == (
        "b",
        "host:1:2",
        (("root/turn-0/model", "model", "b/root"),),
    )
    assert statuses(store, "b", "c") == [("running", "scheduled"), ("pending", "pending")]
    assert [r.run_id for r in finish(store, "b").activated] == ["c"]
    assert finish(store, "c").activated == ()


def test_recovery_finds_and_activates_sessions_whose_last_run_ended_elsewhere(store):
    create(store, "a")
    create(store, "b")
    assert store.stalled_sessions() == []
    assert store.activate_next_pending("conv-1", "user-7") == []  # "a" still runs
    with store.db.transaction() as tx:  # "a" ends outside any commit
        tx.cursor.execute("UPDATE lg_runs SET status = 'failed' WHERE id = 'a'")

    assert store.stalled_sessions() == [("conv-1", "user-7")]
    assert [r.run_id for r in store.activate_next_pending("conv-1", "user-7")] == ["b"]
    assert store.activate_next_pending("conv-1", "user-7") == []
    assert store.stalled_sessions() == []


def test_a_waiting_run_can_be_ended_before_it_starts(store):
    create(store, "a")
    create(store, "b")
    first = store.end_pending_run(
        "b", "cancelled", {"name": "CancelledError"}, {}, [("run_cancel", {"outcome": "cancelled"})]
    )

    assert first == 2 and [e.type for e in store.load_events("b")] == ["invocation_start", "run_cancel"]
    assert statuses(store, "b") == [("cancelled", "cancelled")]
    assert store.end_pending_run("b", "cancelled", None, {}, []) is None  # no longer pending
    assert store.end_pending_run("a", "cancelled", None, {}, []) is None  # running, not pending
    assert finish(store, "a").activated == ()


def test_a_waiting_run_past_its_deadline_closes_its_steps_failed(store):
    """Its steps get the status every ending gives a step (partial is a run's outcome, not a step's)."""
    create(store, "a")
    create(store, "b")
    assert store.end_pending_run("b", "partial", {"name": "DeadlineExceededError"}, {}, [("run_partial", {})]) == 2
    assert statuses(store, "b") == [("partial", "failed")]


def test_a_completed_runs_turn_joins_its_session_in_the_same_commit(store):
    from lg_core.sessions import SqlSessionStore

    create(store, "a")
    turn = (Message(role="user", content="hi"), Message(role="assistant", content="hello"))
    assert finish(store, "a", SessionWrite("conv-1", "user-7", turn, {"k": 1}, 0)).applied
    sessions = SqlSessionStore(database=store.db)
    assert sessions.load("conv-1", actor_id="user-7").messages == turn

    create(store, "b")
    stale = SessionWrite("conv-1", "user-7", turn, {"k": 2}, 0)
    result = finish(store, "b", stale)
    assert (result.applied, result.reason) == (False, "session_conflict")
    assert store.load_run("b").status == "running"  # nothing of the commit was applied
    assert sessions.load("conv-1", actor_id="user-7").state == {"k": 1}


def test_runs_created_at_once_on_one_session_leave_exactly_one_running(store):
    if store.in_memory:
        pytest.skip("one in-memory connection serializes every writer anyway")
    creators = 6
    barrier = threading.Barrier(creators)
    results: dict[str, str] = {}

    def creator(index: int) -> None:
        barrier.wait(30)
        results[f"r{index}"] = create(store, f"r{index}")

    threads = [threading.Thread(target=creator, args=(i,)) for i in range(creators)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sorted(results.values()) == ["pending"] * (creators - 1) + ["running"]
    running = next(r for r, status in results.items() if status == "running")
    order = []
    while running:
        order.append(running)
        activated = finish(store, running).activated
        running = activated[0].run_id if activated else None
    assert sorted(order) == sorted(results) and len(set(order)) == creators


def test_a_waiting_run_ended_while_the_run_before_it_ends_does_not_stall_the_ones_after_it(store, tmp_path):
    """Run "b" is cancelled (still pending) in a transaction not yet committed when "a"'s final
    commit picks the session's next run. That commit must start "c", not give up on "b"."""
    if store.db.dialect_name != "postgresql":
        pytest.skip("SQLite runs one writer at a time: the two transactions cannot overlap")
    create(store, "a")
    create(store, "b")
    create(store, "c")
    other = RunStore(store.url)  # another process's connection
    ended, go = threading.Event(), threading.Event()

    def cancel_b() -> None:
        with other.db.transaction() as tx:
            tx.cursor.execute(
                "UPDATE lg_runs SET status = 'cancelled', finished_at = 1 WHERE id = 'b' AND status = 'pending'"
            )
            ended.set()
            go.wait(30)

    canceller = threading.Thread(target=cancel_b)
    canceller.start()
    try:
        assert ended.wait(30)
        results = []
        finisher = threading.Thread(target=lambda: results.append(finish(store, "a")))
        finisher.start()
        finisher.join(1.0)  # it reads "b" as waiting, then blocks on b's row until the cancel commits
        go.set()
        finisher.join(30)
    finally:
        go.set()
        canceller.join(30)
        other.close()

    [result] = results
    assert result.applied
    assert [r.run_id for r in result.activated] == ["c"]
    assert store.load_run("c").status == "running"
