"""Statements on interjections: user messages queued for a run's next model turn.

The run row counts the pending ones (``interjections_pending``), so a step's claim
and commit learn of them without reading the interjections table.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import and_, bindparam, func, select, update
from sqlalchemy.sql import ClauseElement

from lg_core.store._statement_parts import insert_of
from lg_core.store.schema import interjections, messages, runs

INTERJECTION_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "next_interjection_seq": lambda: select(func.coalesce(func.max(interjections.c.seq), 0) + 1).where(
        interjections.c.run_id == bindparam("run_id")
    ),
    "insert_interjection": insert_of(
        interjections, ("run_id", "seq", "message", "metadata", "created_at", "interjection_id")
    ),
    "find_interjection": lambda: select(interjections.c.seq, interjections.c.message).where(
        and_(
            interjections.c.run_id == bindparam("run_id"),
            interjections.c.interjection_id == bindparam("interjection_id"),
        )
    ),
    "select_interjection": lambda: (
        select(interjections.c.consumed_at, interjections.c.consumed_by, runs.c.status)
        .join(runs, runs.c.id == interjections.c.run_id)
        .where(and_(interjections.c.run_id == bindparam("run_id"), interjections.c.seq == bindparam("seq")))
    ),
    "select_interjections_of_step": lambda: (
        select(interjections.c.seq, interjections.c.interjection_id)
        .where(and_(interjections.c.run_id == bindparam("run_id"), interjections.c.consumed_by == bindparam("step")))
        .order_by(interjections.c.seq)
    ),
    "select_message": lambda: select(messages.c.data).where(
        and_(messages.c.frame_id == bindparam("frame_id"), messages.c.seq == bindparam("seq"))
    ),
    "count_interjections": lambda: (
        update(runs)
        .where(runs.c.id == bindparam("run_id"))
        .values(interjections_pending=runs.c.interjections_pending + bindparam("delta"))
    ),
    "select_pending_interjections": lambda: (
        select(interjections.c.seq, interjections.c.message, interjections.c.metadata)
        .where(and_(interjections.c.run_id == bindparam("run_id"), interjections.c.consumed_at.is_(None)))
        .order_by(interjections.c.seq)
    ),
    "consume_interjection": lambda: (
        update(interjections)
        .where(
            and_(
                interjections.c.run_id == bindparam("run_id"),
                interjections.c.seq == bindparam("seq"),
                interjections.c.consumed_at.is_(None),
            )
        )
        .values(consumed_at=bindparam("now"), consumed_by=bindparam("step"))
    ),
    # A retry gives back interjections its failed ending consumed unread: the ones the
    # ending commit of a rescheduled step took, or a run-level ending (no step) took.
    "unconsume_interjections_of_step": lambda: (
        update(interjections)
        .where(
            and_(
                interjections.c.run_id == bindparam("run_id"),
                interjections.c.consumed_at.is_not(None),
                interjections.c.consumed_by == bindparam("step"),
            )
        )
        .values(consumed_at=None, consumed_by=None)
    ),
    "unconsume_interjections_of_run_ending": lambda: (
        update(interjections)
        .where(
            and_(
                interjections.c.run_id == bindparam("run_id"),
                interjections.c.consumed_at.is_not(None),
                interjections.c.consumed_by.is_(None),
            )
        )
        .values(consumed_at=None)
    ),
}

__all__ = ["INTERJECTION_STATEMENTS"]
