"""Statements on runs and what a run's reads return whole: its row, frames, messages and events.

A run's own row carries its status, cancel flag, holder and event counter; the
status of many runs is read ``STATUS_CHUNK`` ids per statement (a batch polls them).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import and_, bindparam, or_, select, update
from sqlalchemy.sql import ClauseElement

from lg_core.store._statement_parts import (
    FRAME_COLUMNS,
    RUN_COLUMNS,
    STATUS_CHUNK,
    insert_of,
    select_of,
)
from lg_core.store.schema import events, frames, messages, runs

OUTCOME_COLUMNS = ("id", "status", "response", "error", "usage", "result")  # a RunOutcome, not the invocation


RUN_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "insert_run": insert_of(runs, RUN_COLUMNS),
    "insert_frame": insert_of(frames, FRAME_COLUMNS + ("updated_at",)),
    "insert_messages": insert_of(messages, ("frame_id", "seq", "run_id", "role", "data", "created_at")),
    "insert_events": insert_of(events, ("run_id", "seq", "type", "data", "created_at")),
    "bump_run_any": lambda: (
        update(runs)
        .where(runs.c.id == bindparam("run_id"))
        .values(event_seq=runs.c.event_seq + bindparam("n"), updated_at=bindparam("now"))
        .returning(runs.c.event_seq)
    ),
    "select_run": lambda: select_of(runs, RUN_COLUMNS, runs.c.id == bindparam("run_id")),
    "select_runs": lambda: select(*runs.c).order_by(runs.c.created_at.desc()).limit(bindparam("limit")),
    "select_runs_by_status": lambda: (
        select(*runs.c)
        .where(runs.c.status == bindparam("status"))
        .order_by(runs.c.created_at.desc())
        .limit(bindparam("limit"))
    ),
    # The child runs of an assembly run's steps (its Graph nodes, Swarm members, Workflow calls), oldest first.
    "select_child_runs": lambda: (
        select(*runs.c)
        .where(and_(runs.c.parent_run_id == bindparam("run_id"), runs.c.parent_step_key.isnot(None)))
        .order_by(runs.c.created_at)
        .limit(bindparam("limit"))
    ),
    "select_run_flags": lambda: select(runs.c.status, runs.c.cancel_requested, runs.c.holder).where(
        runs.c.id == bindparam("run_id")
    ),
    # An interjection locks the run row, so it cannot slip in while the run's final commit
    # (which updates that row) is deciding that no interjection is pending.
    "lock_run_flags": lambda: (
        select(runs.c.status, runs.c.cancel_requested, runs.c.holder)
        .where(runs.c.id == bindparam("run_id"))
        .with_for_update()
    ),
    "request_cancel": lambda: (
        update(runs)
        .where(and_(runs.c.id == bindparam("run_id"), runs.c.status == "running"))
        .values(cancel_requested=1, updated_at=bindparam("now"))
    ),
    # The running child runs of a run whose cancel was just requested (a Graph's node children).
    "request_cancel_children": lambda: (
        update(runs)
        .where(
            and_(
                runs.c.parent_run_id == bindparam("run_id"),
                runs.c.parent_step_key.isnot(None),
                runs.c.status == "running",
            )
        )
        .values(cancel_requested=1, updated_at=bindparam("now"))
        .returning(runs.c.id)
    ),
    "take_over_run": lambda: (
        update(runs)
        .where(
            and_(
                runs.c.id == bindparam("run_id"),
                runs.c.status == "running",
                or_(runs.c.holder.is_(None), runs.c.holder == bindparam("previous")),
            )
        )
        .values(holder=bindparam("holder"), updated_at=bindparam("now"))
    ),
    "select_frame": lambda: select_of(frames, FRAME_COLUMNS, frames.c.id == bindparam("frame_id")),
    "select_frames_of_run": lambda: select_of(frames, FRAME_COLUMNS, frames.c.run_id == bindparam("run_id")),
    "select_messages": lambda: (
        select(messages.c.seq, messages.c.data)
        .where(and_(messages.c.frame_id == bindparam("frame_id"), messages.c.seq >= bindparam("from_seq")))
        .order_by(messages.c.seq)
    ),
    "select_events": lambda: (
        select(events.c.seq, events.c.type, events.c.data, events.c.created_at)
        .where(and_(events.c.run_id == bindparam("run_id"), events.c.seq > bindparam("after")))
        .order_by(events.c.seq)
    ),
    "select_run_statuses": lambda: select(runs.c.id, runs.c.status, runs.c.holder).where(
        or_(*[runs.c.id == bindparam(f"id{i}") for i in range(STATUS_CHUNK)])
    ),
    "select_run_outcomes": lambda: select_of(
        runs, OUTCOME_COLUMNS, or_(*[runs.c.id == bindparam(f"id{i}") for i in range(STATUS_CHUNK)])
    ),
}

__all__ = ["RUN_STATEMENTS"]
