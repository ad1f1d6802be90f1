"""``Run.once`` claims in the store, so that concurrent callers in any process are serialized.

A run's steps execute on many threads and workers: two parallel tool calls
may both call ``run.once("charge-card", ...)``. A lock in one process cannot
serialize them, so the key is claimed in the store first: the step row
``once/<key>`` is inserted as ``started`` by the caller that performs the
block (leased, and renewed by the heartbeat while the block runs), becomes
``succeeded`` when it returns, and is deleted when it raises, so a later call
may try again. Another caller finds the row and waits for it to settle,
unless its holder is gone (a dead process on this host, or a lease that
expired), in which case the claim is taken over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lg_core.store.database import Database, retry_transient
from lg_core.store.statements import STEP_COLUMNS

_STATUS, _HOLDER, _LEASE = (STEP_COLUMNS.index(name) for name in ("status", "holder", "lease_until"))


@dataclass(frozen=True)
class OnceClaim:
    """What claiming a key found: ``claimed`` (perform the block), ``done``, or ``held`` by another."""

    state: str
    holder: str | None = None
    lease_until: float | None = None


@retry_transient
def claim(db: Database, run_id: str, key: str, holder: str, lease_seconds: float) -> OnceClaim:
    """Insert the ``started`` row for ``key``, or report the row already there.

    Two callers inserting at once: SQLite serializes the transactions; on
    PostgreSQL the loser's duplicate key is retried and finds the winner's row.
    """
    now = time.time()
    with db.transaction() as tx:
        row = tx.fetchone("select_step", {"run_id": run_id, "key": key})
        if row is not None:
            if row[_STATUS] == "succeeded":
                return OnceClaim("done")
            return OnceClaim("held", row[_HOLDER], row[_LEASE])
        tx.execute(
            "insert_once_claim",
            {"run_id": run_id, "key": key, "frame_id": f"{run_id}/root", "kind": "once", "status": "started",
             "attempts": 1, "holder": holder, "lease_until": now + lease_seconds, "created_at": now, "started_at": now},
        )
    return OnceClaim("claimed", holder, now + lease_seconds)


@retry_transient
def finish(db: Database, run_id: str, key: str, holder: str) -> bool:
    """Record that ``holder`` performed the block; False if its claim was taken over meanwhile."""
    with db.transaction() as tx:
        return tx.execute("finish_once", {"run_id": run_id, "key": key, "holder": holder, "now": time.time()}).rowcount == 1


@retry_transient
def drop(db: Database, run_id: str, key: str, holder: str | None) -> bool:
    """Delete ``holder``'s ``started`` claim (its block raised, or the holder is gone)."""
    with db.transaction() as tx:
        return tx.execute("drop_once_claim", {"run_id": run_id, "key": key, "holder": holder}).rowcount == 1


__all__ = ["OnceClaim", "claim", "drop", "finish"]
