"""Statements on batches (lg_scheduler.batch): one row per batch, held by its submitter."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import and_, bindparam, or_, select, update
from sqlalchemy.sql import ClauseElement

from lg_core.store._statement_parts import BATCH_COLUMNS, insert_of, select_of
from lg_core.store.schema import batches

BATCH_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "insert_batch": insert_of(batches, BATCH_COLUMNS),
    "select_batch": lambda: select_of(batches, BATCH_COLUMNS, batches.c.id == bindparam("batch_id")),
    "select_batches": lambda: select(*batches.c).order_by(batches.c.created_at.desc()).limit(bindparam("limit")),
    "claim_batch": lambda: (
        update(batches)
        .where(
            and_(
                batches.c.id == bindparam("batch_id"),
                or_(batches.c.holder.is_(None), batches.c.holder == bindparam("previous")),
            )
        )
        .values(holder=bindparam("holder"), status="running", total=bindparam("total"), updated_at=bindparam("now"))
    ),
    "update_batch": lambda: (
        update(batches)
        .where(and_(batches.c.id == bindparam("batch_id"), batches.c.holder == bindparam("holder")))
        .values(
            completed=bindparam("completed"),
            failed=bindparam("failed"),
            invalid=bindparam("invalid"),
            running=bindparam("running"),
            status=bindparam("status"),
            holder=bindparam("next_holder"),
            updated_at=bindparam("now"),
            finished_at=bindparam("finished_at"),
        )
    ),
}

__all__ = ["BATCH_STATEMENTS"]
