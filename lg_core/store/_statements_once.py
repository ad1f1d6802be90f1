"""Statements of ``Run.once`` claims across processes (lg_core.store._once_claims).

A ``once/<key>`` step row is the claim: ``started`` while its holder performs the block
(leased and renewed like a running step), ``succeeded`` once it returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import and_, bindparam, case, delete, insert, null, or_, select, update
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement

from lg_core.store._clock import store_now
from lg_core.store._statement_parts import later
from lg_core.store.schema import steps


def _started_once(holder: str) -> ColumnElement[bool]:
    return and_(
        steps.c.run_id == bindparam("run_id"),
        steps.c.key == bindparam("key"),
        steps.c.status == "started",
        steps.c.holder == bindparam(holder),
    )


def _lease_expired() -> ColumnElement[bool]:
    return or_(steps.c.lease_until.is_(None), steps.c.lease_until < store_now())


def _insert_once_claim() -> ClauseElement:
    """The ``started`` row, leased ``lease_seconds`` from now by the store's clock; returns the lease."""
    columns = ("run_id", "key", "frame_id", "kind", "status", "attempts", "holder", "created_at", "started_at")
    values: dict[str, Any] = {name: bindparam(name) for name in columns}
    return insert(steps).values({**values, "lease_until": later("lease_seconds")}).returning(steps.c.lease_until)


ONCE_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "insert_once_claim": _insert_once_claim,
    # The claim as a waiting caller sees it; whether its lease ran out is the store clock's call (1 or 0).
    "select_once_claim": lambda: select(
        steps.c.status, steps.c.holder, steps.c.lease_until, case((_lease_expired(), 1), else_=0)
    ).where(and_(steps.c.run_id == bindparam("run_id"), steps.c.key == bindparam("key"))),
    "finish_once": lambda: (
        update(steps)
        .where(_started_once("holder"))
        .values(status="succeeded", finished_at=bindparam("now"), lease_until=null())
    ),
    # The holder's block raised (it may be tried again), or the holder's process is gone.
    "drop_once_claim": lambda: delete(steps).where(_started_once("holder")),
    # The holder stopped renewing: only while its lease is still expired (by the store's clock).
    "drop_expired_once_claim": lambda: delete(steps).where(and_(_started_once("holder"), _lease_expired())),
}

__all__ = ["ONCE_STATEMENTS"]
