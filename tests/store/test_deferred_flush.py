"""A SQLite file store commits every claim without waiting for an fsync.

A claim only says "this process is running the step". Losing it in a power
cut makes the step look scheduled again, and it runs again: allowed for an
idempotent step (a model turn, a tool not marked at_most_once), and harmless
for an at_most_once tool, whose attempt writes a flushed mark before the tool
starts (that flush also syncs the claim written before it, and a later attempt
decides from the mark). SQLite fixes the sync level before BEGIN, so a claim's
transaction runs at ``synchronous=NORMAL`` and the level is put back after it.
The statements SQLite runs are read with its trace hook.
"""

from __future__ import annotations

import pytest

from lg_core.messages import Message
from lg_core.store import NewStep, RunStore
from lg_core.store.transactions import Transaction

MODEL, IDEMPOTENT_TOOL, AT_MOST_ONCE_TOOL = "root/turn-0/model", "root/turn-0/tool/a", "root/turn-0/tool/b"


@pytest.fixture
def file_store(tmp_path):
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    yield store
    store.close()


def create_run(store: RunStore) -> None:
    store.create_run(
        {
            "id": "r1",
            "entrypoint": "app:Agent",
            "kind": "agent",
            "status": "running",
            "invocation": {"message": "hi"},
            "session_id": "r1",
            "actor_id": None,
            "holder": None,
            "deadline_at": None,
        },
        {
            "id": "r1/root",
            "run_id": "r1",
            "path": "root",
            "kind": "agent",
            "entrypoint": "app:Agent",
            "version": 0,
            "checkpoint": {"turn": 0},
        },
        [(0, Message(role="user", content="hi"))],
        [("invocation_start", {"run_id": "r1"})],
        [
            NewStep(key=MODEL, frame_id="r1/root", kind="model"),
            NewStep(key=IDEMPOTENT_TOOL, frame_id="r1/root", kind="tool", input={"id": "a", "idempotent": True}),
            NewStep(key=AT_MOST_ONCE_TOOL, frame_id="r1/root", kind="tool", input={"id": "b"}),
        ],
    )


def traced(store: RunStore) -> tuple[list[str], object]:
    """The statements this thread's store connection runs from now on, and that connection."""
    connection = store.db._sqlite_connection().driver_connection
    statements: list[str] = []
    connection.set_trace_callback(statements.append)
    return statements, connection


def after_commit(statements: list[str]) -> list[str]:
    return statements[statements.index("COMMIT") + 1 :]


def synchronous(connection) -> int:
    return connection.execute("PRAGMA synchronous").fetchone()[0]


@pytest.mark.parametrize("key", [MODEL, IDEMPOTENT_TOOL, AT_MOST_ONCE_TOOL])
def test_a_claim_commits_without_waiting_for_the_disk(file_store, key):
    create_run(file_store)
    statements, connection = traced(file_store)

    claimed = file_store.claim_and_load("r1", key, "worker-1", 30)

    assert claimed.attempts == 1
    assert statements[0] == "PRAGMA synchronous=NORMAL" and statements[1] == "BEGIN IMMEDIATE"
    assert after_commit(statements) == ["PRAGMA synchronous=FULL"]
    assert synchronous(connection) == 2  # FULL again for every other transaction
    step = file_store.load_step("r1", key)
    assert (step.status, step.holder, step.lease_until) == ("running", "worker-1", claimed.step.lease_until)


def test_a_failed_claim_leaves_the_connection_at_its_level_and_usable(file_store, monkeypatch):
    create_run(file_store)
    _statements, connection = traced(file_store)
    submit = Transaction.submit

    def failing_read(tx, name, params=None):
        if name == "select_claimed_frame_with_tail":
            raise RuntimeError("the frame read failed")
        return submit(tx, name, params)

    monkeypatch.setattr(Transaction, "submit", failing_read)
    with pytest.raises(RuntimeError, match="the frame read failed"):
        file_store.claim_and_load("r1", MODEL, "worker-1", 30)
    monkeypatch.undo()

    assert synchronous(connection) == 2 and not connection.in_transaction
    assert file_store.load_step("r1", MODEL).status == "scheduled"  # rolled back
    assert file_store.claim_and_load("r1", MODEL, "worker-1", 30).attempts == 1


def test_stores_without_a_flush_to_defer_run_no_pragma(tmp_path):
    stores = [RunStore("sqlite://")]
    stores += [RunStore(f"sqlite:///{tmp_path / f'{level}.db'}", synchronous=level) for level in ("OFF", "NORMAL")]
    for store in stores:
        try:
            create_run(store)
            statements, _connection = traced(store)
            assert store.claim_and_load("r1", MODEL, "worker-1", 30).attempts == 1
            assert not any(s.startswith("PRAGMA") for s in statements)
        finally:
            store.close()


def test_the_mark_that_an_at_most_once_tool_starts_is_flushed(file_store):
    """A re-attempt decides from it whether the tool may have run: it must survive any crash
    once the tool may have started, so it commits at the store's own level (FULL), never deferred."""
    create_run(file_store)
    claimed = file_store.claim_and_load("r1", AT_MOST_ONCE_TOOL, "worker-1", 30)
    statements, connection = traced(file_store)

    assert file_store.mark_body_entered("r1", AT_MOST_ONCE_TOOL, "worker-1", claimed.attempts)

    assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"
    assert statements[1].startswith("UPDATE lg_steps SET body_entered_at")
    assert not any(s.startswith("PRAGMA") for s in statements)
    assert synchronous(connection) == 2  # FULL
