"""Statements on session rows and on runs sharing a session (lg_core.sessions, lg_core.store.session_transactions).

A session row is keyed by (session_id, actor_key), and a session id has one row (its
owner's: lg_sessions_owner); a run matches it through coalesce(actor_id, '') so a run
without an actor meets the session's "" key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, literal, null, or_, select, union_all, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement

from lg_core.store._statement_parts import insert_of, later
from lg_core.store.schema import interjections, runs, session_messages, sessions, steps

SESSION_COLUMNS = tuple(c.name for c in sessions.columns)


def _insert_if_absent(table: object, columns: tuple[str, ...]) -> Callable[[], ClauseElement]:
    """An INSERT of ``columns`` that does nothing when the primary key exists (row count 0).

    Built with PostgreSQL's construct, which compiles to the same ``ON CONFLICT
    DO NOTHING`` for SQLite (3.24 and later).
    """
    return lambda: postgresql.insert(table).values({name: bindparam(name) for name in columns}).on_conflict_do_nothing()  # type: ignore[arg-type]


def _session_row(table: object) -> ColumnElement[bool]:
    return and_(table.c.session_id == bindparam("session_id"), table.c.actor_key == bindparam("actor_key"))  # type: ignore[attr-defined]


def _session_runs(table: object = runs) -> ColumnElement[bool]:
    return and_(
        table.c.session_id == bindparam("session_id"),  # type: ignore[attr-defined]
        func.coalesce(table.c.actor_id, "") == bindparam("actor_key"),  # type: ignore[attr-defined]
    )


def _session_runner() -> ClauseElement:
    """The running run of a session (id and holder): what its pending runs wait for."""
    return select(runs.c.id, runs.c.holder).where(and_(_session_runs(), runs.c.status == "running")).limit(1)


def _append_session(keep_metadata: bool) -> Callable[[], ClauseElement]:
    def build() -> ClauseElement:
        values: dict[str, Any] = {
            "message_count": bindparam("count"),
            "state": bindparam("state"),
            "updated_at": bindparam("now"),
        }
        if not keep_metadata:
            values["metadata"] = bindparam("metadata")
        # The expected_count check and the move happen in one UPDATE: a concurrent
        # writer either sees the old count (and waits on the row) or the new one.
        return (
            update(sessions)
            .where(and_(_session_row(sessions), sessions.c.message_count == bindparam("expected")))
            .values(values)
        )

    return build


def _load_session() -> ClauseElement:
    """A session's row and its messages in one statement, so one snapshot (a read needs no lock).

    The row comes first with seq -1 (state in ``data``, metadata and count after it),
    then the messages below the row's count, in order.
    """
    row = select(
        literal(-1).label("seq"), sessions.c.state.label("data"), sessions.c.metadata, sessions.c.message_count
    ).where(_session_row(sessions))
    listed = (
        select(session_messages.c.seq, session_messages.c.data, null(), null())
        .select_from(
            session_messages.join(
                sessions,
                and_(
                    sessions.c.session_id == session_messages.c.session_id,
                    sessions.c.actor_key == session_messages.c.actor_key,
                    session_messages.c.seq < sessions.c.message_count,
                ),
            )
        )
        .where(_session_row(session_messages))
    )
    return union_all(row, listed).order_by("seq")


def _stalled_sessions() -> ClauseElement:
    waiting, active = runs.alias("waiting"), runs.alias("active")
    running = (
        select(active.c.id)
        .where(
            and_(
                active.c.session_id == waiting.c.session_id,
                func.coalesce(active.c.actor_id, "") == func.coalesce(waiting.c.actor_id, ""),
                active.c.status == "running",
            )
        )
        .exists()
    )
    return (
        select(waiting.c.session_id, waiting.c.actor_id)
        .where(and_(waiting.c.status == "pending", ~running))
        .group_by(waiting.c.session_id, waiting.c.actor_id)
        .limit(bindparam("limit"))
    )


SESSION_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "select_session": lambda: select(sessions.c.message_count, sessions.c.state, sessions.c.metadata).where(
        _session_row(sessions)
    ),
    "load_session": _load_session,
    "select_session_owner": lambda: select(sessions.c.actor_key).where(
        sessions.c.session_id == bindparam("session_id")
    ),
    "select_session_runner": _session_runner,
    "insert_session": insert_of(sessions, SESSION_COLUMNS),
    "insert_session_if_absent": _insert_if_absent(sessions, SESSION_COLUMNS),
    "append_session": _append_session(keep_metadata=False),
    "append_session_keep_metadata": _append_session(keep_metadata=True),
    "replace_session": lambda: (
        update(sessions)
        .where(_session_row(sessions))
        .values(
            message_count=bindparam("count"),
            state=bindparam("state"),
            metadata=bindparam("metadata"),
            updated_at=bindparam("now"),
        )
    ),
    "delete_session_messages": lambda: delete(session_messages).where(_session_row(session_messages)),
    "insert_session_messages": insert_of(session_messages, ("session_id", "actor_key", "seq", "data")),
    # PostgreSQL only: one transaction at a time decides who runs next on a session.
    "lock_session": lambda: select(func.pg_advisory_xact_lock(func.hashtextextended(bindparam("lock_key"), 0))),
    "select_session_open_runs": lambda: (
        select(runs.c.id, runs.c.status, runs.c.holder)
        .where(and_(_session_runs(), or_(runs.c.status == "running", runs.c.status == "pending")))
        .order_by(runs.c.created_at, runs.c.id)
    ),
    "select_run_session": lambda: select(runs.c.session_id, runs.c.actor_id).where(runs.c.id == bindparam("run_id")),
    "activate_run": lambda: (
        update(runs)
        .where(and_(runs.c.id == bindparam("run_id"), runs.c.status == "pending"))
        .values(status="running", updated_at=bindparam("now"))
    ),
    "release_pending_steps": lambda: (
        update(steps)
        .where(and_(steps.c.run_id == bindparam("run_id"), steps.c.status == "pending"))
        .values(status="scheduled", dispatch_after=later("grace"))
        .returning(steps.c.key, steps.c.kind, steps.c.frame_id)
    ),
    "end_pending_run": lambda: (
        update(runs)
        .where(and_(runs.c.id == bindparam("run_id"), runs.c.status == "pending"))
        .values(
            status=bindparam("status"),
            error=bindparam("error"),
            usage=bindparam("usage"),
            event_seq=runs.c.event_seq + bindparam("n"),
            holder=null(),
            updated_at=bindparam("now"),
            finished_at=bindparam("now"),
        )
        .returning(runs.c.event_seq)
    ),
    # A run ended before it started never reads its interjections: consumed by no step.
    "consume_unread_interjections": lambda: (
        update(interjections)
        .where(and_(interjections.c.run_id == bindparam("run_id"), interjections.c.consumed_at.is_(None)))
        .values(consumed_at=bindparam("now"), consumed_by=null())
    ),
    "end_pending_steps": lambda: (
        update(steps)
        .where(and_(steps.c.run_id == bindparam("run_id"), steps.c.status == "pending"))
        .values(status=bindparam("status"), finished_at=bindparam("now"), dispatch_after=null())
    ),
    "select_stalled_sessions": _stalled_sessions,
}

__all__ = ["SESSION_STATEMENTS"]
