"""Session rows and session serialization, as transaction helpers.

Two things live here because they must happen inside other transactions:

* **Session rows** (``lg_sessions`` / ``lg_session_messages``): the
  SqlSessionStore's reads and writes, which the RunStore also runs inside a
  completing run's commit when the session store shares its database. The
  ``expected_count`` check is the append's own conditional UPDATE. A session
  id has one row, its owner's (a unique index): a read or write that names it
  with another actor raises SessionActorError, and of two actors inserting
  one new session the index lets one in and the other finds the winner's row.
* **Serialization of runs sharing a session** (``lg_runs`` by session id and
  actor): a run created while another run of its session is running or
  pending is stored ``pending`` with its first steps ``pending`` too (not in
  the outbox); when a run of the session ends, the same transaction makes the
  oldest pending run ``running`` and moves its steps to ``scheduled``. On
  PostgreSQL both decisions take a transaction-scoped advisory lock on the
  session key, so a starting run and a finishing run cannot each miss the
  other (SQLite's BEGIN IMMEDIATE already serializes every writer).

Helpers take an open :class:`~lg_core.store.transactions.Transaction` and never
commit; the public methods that call them (RunStore, SqlSessionStore) do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lg_core.errors import SessionActorError
from lg_core.store.records import ActivatedRun, dumps, loads
from lg_core.store.transactions import Submitted, Transaction

RUNNING, PENDING = "running", "pending"


def actor_key(actor_id: str | None) -> str:
    """The key column value for an actor: its id, or "" for none (ids are never empty)."""
    return actor_id or ""


def _key(session_id: str, actor_id: str | None) -> dict[str, str]:
    return {"session_id": session_id, "actor_key": actor_key(actor_id)}


# -- serialization of runs -------------------------------------------------------------------


def _lock_params(session_id: str, actor_id: str | None) -> dict[str, str]:
    return {"lock_key": f"{session_id}\x1f{actor_key(actor_id)}"}


def lock_session_txn(tx: Transaction, session_id: str, actor_id: str | None) -> None:
    """Serialize decisions about this session's runs until the transaction ends (PostgreSQL)."""
    if tx.dialect_name == "postgresql":
        tx.execute("lock_session", _lock_params(session_id, actor_id))


def session_busy_txn(tx: Transaction, session_id: str, actor_id: str | None) -> bool:
    """Is a run of this session running or waiting? (Call after :func:`lock_session_txn`.)"""
    return tx.fetchone("select_session_open_runs", _key(session_id, actor_id)) is not None


def session_open_runs_txn(tx: Transaction, session_id: str, actor_id: str | None) -> list[Any]:
    """``(run id, status, holder)`` of the session's running and pending runs, oldest first,
    under the session's lock (:func:`lock_session_txn`).

    The lock goes out without waiting for its answer: the read after it waits
    for both, so a pipelined transaction makes one round trip for the two.
    """
    if tx.dialect_name == "postgresql":
        tx.send("lock_session", _lock_params(session_id, actor_id))
    return tx.fetchall("select_session_open_runs", _key(session_id, actor_id))


def session_open_runs_submit(tx: Transaction, session_id: str, actor_id: str | None) -> Submitted:
    """:func:`session_open_runs_txn` sent without waiting: its rows are read later (``all()``).

    For a pipelined transaction that reads the answer together with other
    results: a run's creation (any row: the session is busy) and a run's
    finishing commit (the runs it may activate), one round trip fewer each.
    """
    if tx.dialect_name == "postgresql":
        tx.send("lock_session", _lock_params(session_id, actor_id))
    return tx.submit("select_session_open_runs", _key(session_id, actor_id))


def activate_next_txn(
    tx: Transaction, session_id: str, actor_id: str | None, now: float, grace: float, open_runs: Submitted | None = None
) -> list[ActivatedRun]:
    """Start the oldest pending run of the session when none is running; the activated runs.

    ``open_runs`` is the session's open runs if the caller already sent their
    read (:func:`session_open_runs_submit`, which also took the session's lock).

    A run read as pending may have ended meanwhile without the session lock (a
    cancel or deadline of a waiting run, ``end_pending_run``): on PostgreSQL its
    ``activate_run`` waits for that transaction and then matches nothing. The
    next pending run is started instead, or the session would keep waiting
    runs and none running (only the scheduler's stalled-session sweep would
    start them, and local runs have none).
    """
    runs = session_open_runs_txn(tx, session_id, actor_id) if open_runs is None else open_runs.all()
    if not runs or any(status == RUNNING for _id, status, _holder in runs):
        return []
    for run_id, _status, holder in runs:
        if tx.execute("activate_run", {"run_id": run_id, "now": now}).rowcount == 1:
            released = tx.fetchall("release_pending_steps", {"run_id": run_id, "now": now, "grace": grace})
            return [ActivatedRun(run_id, holder, tuple((key, kind, frame_id) for key, kind, frame_id in released))]
        flags = tx.fetchone("select_run_flags", {"run_id": run_id})
        if flags is not None and flags[0] == RUNNING:  # started by another decision: it runs, the rest wait
            return []
    return []


def activate_after_txn(
    tx: Transaction, run_id: str, now: float, grace: float, session: tuple[str, str | None] | None = None
) -> list[ActivatedRun]:
    """A run just ended in this transaction: let the next run of its session start.

    ``session`` is the run's ``(session_id, actor_id)`` when the caller has it
    (a completion writing the session's turn), which spares reading it from the
    run's row: in a pipelined commit each read is a round trip of its own.
    """
    if session is None:
        row = tx.fetchone("select_run_session", {"run_id": run_id})
        if row is None:
            return []
        session = (row[0], row[1])
    return activate_next_txn(tx, session[0], session[1], now, grace)


def stalled_sessions_txn(tx: Transaction, limit: int) -> list[tuple[str, str | None]]:
    """Sessions with a pending run and no running one (their last run ended without activating)."""
    return [(session_id, actor_id) for session_id, actor_id in tx.fetchall("select_stalled_sessions", {"limit": limit})]


# -- session rows ----------------------------------------------------------------------------


def load_session_txn(tx: Transaction, session_id: str, actor_id: str | None) -> tuple[list[Any], Any, Any] | None:
    """``(message dicts, state, metadata)`` of a session, or None when it has never been written.

    One statement reads the row and its messages, so a reader needs no
    transaction of its own and never sees half of a concurrent replace.
    """
    rows = tx.fetchall("load_session", _key(session_id, actor_id))
    if not rows:
        _refuse_another_owner(tx, session_id, actor_id)
        return None
    _seq, state, metadata, _count = rows[0]
    return [loads(data) for _seq, data, _m, _c in rows[1:]], loads(state), loads(metadata)


def append_session_txn(
    tx: Transaction,
    session_id: str,
    actor_id: str | None,
    messages: Sequence[dict[str, Any]],
    state: dict[str, Any],
    metadata: dict[str, Any] | None,
    expected: int,
    now: float,
) -> int | None:
    """Append while the session holds ``expected`` messages; None on success, else the stored count.

    ``metadata`` None keeps the stored metadata (``{}`` for a new session). An
    append expecting 0 messages inserts the session's row unless it exists; a
    creator racing another finds the winner's row and, when the winner added
    messages, its count.
    """
    key = _key(session_id, actor_id)
    params: dict[str, Any] = {
        **key,
        "expected": expected,
        "count": expected + len(messages),
        "state": dumps(state),
        "now": now,
    }
    if expected == 0 and _created(tx, key, len(messages), params["state"], dumps(metadata or {}), now):
        # A first append usually makes the session: one statement, where the update below would
        # find no row and then read it back before inserting (three round trips in a pipelined commit).
        _insert_messages_txn(tx, key, 0, messages)
        return None
    if metadata is None:
        moved = tx.execute("append_session_keep_metadata", params).rowcount
    else:
        moved = tx.execute("append_session", {**params, "metadata": dumps(metadata)}).rowcount
    if moved != 1:
        row = tx.fetchone("select_session", key)
        if row is not None:
            return int(row[0])
        _refuse_another_owner(tx, session_id, actor_id)
        if expected != 0:
            return 0
        tx.execute(
            "insert_session",
            {
                **key,
                "message_count": len(messages),
                "state": params["state"],
                "metadata": dumps(metadata or {}),
                "created_at": now,
                "updated_at": now,
            },
        )
    _insert_messages_txn(tx, key, expected, messages)
    return None


def _created(tx: Transaction, key: dict[str, str], count: int, state: str, metadata: str, now: float) -> bool:
    """Insert the session's row unless it exists; did this insert it? (Its creator racing
    another: the loser finds the row and goes on as an append to an existing session.)"""
    row = {**key, "message_count": count, "state": state, "metadata": metadata, "created_at": now, "updated_at": now}
    return tx.execute("insert_session_if_absent", row).rowcount == 1


def replace_session_txn(
    tx: Transaction,
    session_id: str,
    actor_id: str | None,
    messages: Sequence[dict[str, Any]],
    state: dict[str, Any],
    metadata: dict[str, Any],
    now: float,
) -> None:
    """Swap the whole snapshot: the row first (it is what concurrent loads lock), then the messages."""
    key = _key(session_id, actor_id)
    stored_state, stored_metadata = dumps(state), dumps(metadata)
    params = {**key, "count": len(messages), "state": stored_state, "metadata": stored_metadata, "now": now}
    if tx.execute("replace_session", params).rowcount != 1 and not _created(
        tx, key, len(messages), stored_state, stored_metadata, now
    ):
        # The id has a row after all: another actor's (refused), or this actor's, made by a
        # writer that committed after the update looked (PostgreSQL), which is replaced now.
        _refuse_another_owner(tx, session_id, actor_id)
        tx.execute("replace_session", params)
    tx.execute("delete_session_messages", key)
    _insert_messages_txn(tx, key, 0, messages)


def _refuse_another_owner(tx: Transaction, session_id: str, actor_id: str | None) -> None:
    """SessionActorError when another actor owns ``session_id`` (its row is not under this key)."""
    owner = tx.fetchone("select_session_owner", {"session_id": session_id})
    if owner is not None and owner[0] != actor_key(actor_id):
        raise SessionActorError.for_session(session_id)


def _insert_messages_txn(tx: Transaction, key: dict[str, str], first: int, messages: Sequence[dict[str, Any]]) -> None:
    tx.executemany(
        "insert_session_messages", [{**key, "seq": first + i, "data": dumps(m)} for i, m in enumerate(messages)]
    )


__all__ = [
    "actor_key",
    "activate_after_txn",
    "activate_next_txn",
    "append_session_txn",
    "load_session_txn",
    "lock_session_txn",
    "replace_session_txn",
    "session_busy_txn",
    "session_open_runs_submit",
    "session_open_runs_txn",
    "stalled_sessions_txn",
]
