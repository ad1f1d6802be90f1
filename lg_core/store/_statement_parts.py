"""What the run store's statement groups share: column lists and small statement builders.

Every ``_statements_*`` module builds its statements from these, so a column list
or a condition (an open step, a step its holder still holds) is written once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Float, and_, bindparam, insert, or_, select
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import Select

from lg_core.store._clock import store_now
from lg_core.store.schema import batches, runs, steps

RUN_COLUMNS = tuple(c.name for c in runs.columns)
FRAME_COLUMNS = ("id", "run_id", "path", "kind", "entrypoint", "version", "checkpoint")
STEP_COLUMNS = (
    "run_id",
    "key",
    "frame_id",
    "kind",
    "status",
    "input",
    "result",
    "error",
    "attempts",
    "holder",
    "lease_until",
    "created_at",
    "started_at",
    "finished_at",
    "scheduled_by",
    "checkpoint",
    "event_seq",
    "body_entered_at",
)
BATCH_COLUMNS = tuple(c.name for c in batches.columns)
# Run statuses are polled this many ids per statement: a fixed shape compiles once
# (callers pad a short chunk by repeating an id).
STATUS_CHUNK = 16


def open_step() -> ColumnElement[bool]:
    """The step is open: scheduled or running.

    Two comparisons rather than IN (...): IN with literals needs SQLAlchemy's
    post-compile expansion, which the compiled-once statements skip.
    """
    return or_(steps.c.status == "scheduled", steps.c.status == "running")


def insert_of(table: object, columns: tuple[str, ...], **computed: ColumnElement[Any]) -> Callable[[], Insert]:
    """An INSERT binding ``columns`` by name, and ``computed`` columns from SQL expressions."""
    return lambda: insert(table).values({**{name: bindparam(name) for name in columns}, **computed})  # type: ignore[arg-type]


def later(seconds: str) -> ColumnElement[float]:
    """``store_now()`` plus the duration parameter ``seconds`` (a NULL duration gives NULL)."""
    return store_now() + bindparam(seconds, type_=Float())


def select_of(table: object, columns: tuple[str, ...], *conditions: ColumnElement[bool]) -> Select[*tuple[Any, ...]]:
    """A SELECT of ``table``'s ``columns`` (in that order, as the records unpack them) where all ``conditions`` hold."""
    cols = [table.c[name] for name in columns]  # type: ignore[attr-defined]
    return select(*cols).where(and_(*conditions))


def held_by_holder() -> ColumnElement[bool]:
    """Step ``key`` of run ``run_id``, running and still held by ``holder``."""
    return and_(
        steps.c.run_id == bindparam("run_id"),
        steps.c.key == bindparam("key"),
        steps.c.status == "running",
        steps.c.holder == bindparam("holder"),
    )


__all__ = [
    "BATCH_COLUMNS",
    "FRAME_COLUMNS",
    "RUN_COLUMNS",
    "STATUS_CHUNK",
    "STEP_COLUMNS",
    "held_by_holder",
    "insert_of",
    "later",
    "open_step",
    "select_of",
]
