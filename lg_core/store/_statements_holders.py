"""Statements on holder leases (lg_core.store._holder_leases): a process's own lease, renewed while it
holds code-mode programs, written and judged by the store's clock (lg_core.store._clock)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Float, bindparam, delete, insert, select, update
from sqlalchemy.sql import ClauseElement

from lg_core.store._clock import store_now
from lg_core.store._statement_parts import later
from lg_core.store.schema import holder_leases

HOLDER_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "renew_holder_lease": lambda: (
        update(holder_leases)
        .where(holder_leases.c.holder == bindparam("holder"))
        .values(lease_until=later("lease_seconds"))
    ),
    "insert_holder_lease": lambda: insert(holder_leases).values(
        holder=bindparam("holder"), lease_until=later("lease_seconds")
    ),
    "drop_holder_lease": lambda: delete(holder_leases).where(holder_leases.c.holder == bindparam("holder")),
    # Leases that ran out ``age`` seconds ago or earlier: their processes died without dropping them.
    "drop_stale_holder_leases": lambda: delete(holder_leases).where(
        holder_leases.c.lease_until < store_now() - bindparam("age", type_=Float())
    ),
    "select_holder_lease": lambda: select(holder_leases.c.lease_until).where(
        holder_leases.c.holder == bindparam("holder")
    ),
}

__all__ = ["HOLDER_STATEMENTS"]
