"""Statements of retention (lg_core.store.retention) and of reading runs that ended since a time.

One finished run at a time, by key: the statements compile once (no IN lists) and
each uses a primary key or lg_runs_status, never a scan of a history table.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import and_, bindparam, delete, func, or_, select, tuple_
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement

from lg_core.store.schema import (
    batches,
    events,
    frames,
    interjections,
    messages,
    runs,
    session_messages,
    sessions,
    steps,
)


def _no_run_of_session() -> ColumnElement[bool]:
    """No run in the store (the one being pruned is already deleted) has the session ``run_id``."""
    return ~select(runs.c.id).where(runs.c.session_id == bindparam("run_id")).exists()


def _finished_batch() -> ColumnElement[bool]:
    return and_(batches.c.status == "finished", batches.c.finished_at < bindparam("cutoff"))


RETENTION_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    # created_at < cutoff is implied by finished_at < cutoff and lets lg_runs_status bound the scan.
    "select_prunable_runs": lambda: (
        select(runs.c.id, runs.c.created_at)
        .where(
            and_(
                runs.c.status == bindparam("status"),
                runs.c.created_at < bindparam("cutoff"),
                runs.c.finished_at < bindparam("cutoff"),
                # keyset pagination: the runs a pass keeps (a batch's) are not read again
                tuple_(runs.c.created_at, runs.c.id) > tuple_(bindparam("after_created"), bindparam("after_id")),
            )
        )
        .order_by(runs.c.created_at, runs.c.id)
        .limit(bindparam("limit"))
    ),
    "select_unfinished_batch_ids": lambda: select(batches.c.id).where(
        or_(batches.c.status != "finished", batches.c.finished_at >= bindparam("cutoff"))
    ),
    "delete_run_messages": lambda: delete(messages).where(
        messages.c.frame_id.in_(select(frames.c.id).where(frames.c.run_id == bindparam("run_id")).scalar_subquery())
    ),
    "delete_run_frames": lambda: delete(frames).where(frames.c.run_id == bindparam("run_id")),
    "delete_run_steps": lambda: delete(steps).where(steps.c.run_id == bindparam("run_id")),
    "delete_run_events": lambda: delete(events).where(events.c.run_id == bindparam("run_id")),
    "delete_run_interjections": lambda: delete(interjections).where(interjections.c.run_id == bindparam("run_id")),
    # A run asked without a session_id has a session of its own, keyed by the run's id; it goes
    # with the run, unless another run still in the store continues it (asked with that id).
    "delete_own_session": lambda: delete(sessions).where(
        and_(sessions.c.session_id == bindparam("run_id"), _no_run_of_session())
    ),
    "delete_own_session_messages": lambda: delete(session_messages).where(
        and_(session_messages.c.session_id == bindparam("run_id"), _no_run_of_session())
    ),
    # Only while still finished: a run retried since it was selected is left alone.
    "delete_finished_run": lambda: delete(runs).where(
        and_(
            runs.c.id == bindparam("run_id"),
            runs.c.status == bindparam("status"),
            runs.c.finished_at < bindparam("cutoff"),
        )
    ),
    "count_finished_batches": lambda: select(func.count()).where(_finished_batch()),
    # lg runs retry-failed: one status's runs that ended at or after a time, oldest first.
    "select_runs_finished_since": lambda: (
        select(*runs.c)
        .where(and_(runs.c.status == bindparam("status"), runs.c.finished_at >= bindparam("since")))
        .order_by(runs.c.finished_at, runs.c.id)
        .limit(bindparam("limit"))
    ),
    "delete_finished_batches": lambda: delete(batches).where(_finished_batch()),
}

__all__ = ["RETENTION_STATEMENTS"]
