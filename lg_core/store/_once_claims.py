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

Whether a lease expired is decided by the store's clock (lg_core.store._clock):
the claim's lease is written and compared in SQL, so a waiting caller on a
host whose clock runs ahead cannot take a live claim over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lg_core.store._store_part import StorePart
from lg_core.store.database import Database
from lg_core.store.transactions import Transaction
from lg_core.store.transient_errors import retry_transient


@dataclass(frozen=True)
class OnceClaim:
    """What claiming a key found: ``claimed`` (perform the block), ``done``, or ``held`` by another.

    ``expired``: the holder's lease ran out, by the store's clock (only ever set on ``held``).
    """

    state: str
    holder: str | None = None
    lease_until: float | None = None
    expired: bool = False


@retry_transient
def claim(db: Database, run_id: str, key: str, holder: str, lease_seconds: float) -> OnceClaim:
    """Insert the ``started`` row for ``key``, or report the row already there.

    Two callers inserting at once: SQLite serializes the transactions; on
    PostgreSQL the loser's duplicate key is retried and finds the winner's row.
    """
    now = time.time()
    with db.transaction() as tx:
        found = _look_txn(tx, run_id, key, now)
        if found is not None:
            return found
        (lease_until,) = tx.fetchone(
            "insert_once_claim",
            {
                "run_id": run_id,
                "key": key,
                "frame_id": f"{run_id}/root",
                "kind": "once",
                "status": "started",
                "attempts": 1,
                "holder": holder,
                "lease_seconds": lease_seconds,
                "now": now,
                "created_at": now,
                "started_at": now,
            },
        )
    return OnceClaim("claimed", holder, lease_until)


@retry_transient
def look(db: Database, run_id: str, key: str) -> OnceClaim | None:
    """The claim on ``key`` as it stands (``done`` or ``held``), or None when the key is free.

    A read, not a write transaction: a caller waiting on another's claim polls this.
    """
    with db.reader() as tx:
        return _look_txn(tx, run_id, key, time.time())


def _look_txn(tx: Transaction, run_id: str, key: str, now: float) -> OnceClaim | None:
    row = tx.fetchone("select_once_claim", {"run_id": run_id, "key": key, "now": now})
    if row is None:
        return None
    status, holder, lease_until, expired = row
    if status == "succeeded":
        return OnceClaim("done")
    return OnceClaim("held", holder, lease_until, bool(expired))


@retry_transient
def finish(db: Database, run_id: str, key: str, holder: str) -> bool:
    """Record that ``holder`` performed the block; False if its claim was taken over meanwhile."""
    with db.transaction() as tx:
        return (
            tx.execute("finish_once", {"run_id": run_id, "key": key, "holder": holder, "now": time.time()}).rowcount
            == 1
        )


@retry_transient
def drop(db: Database, run_id: str, key: str, holder: str | None, *, expired_only: bool = False) -> bool:
    """Delete ``holder``'s ``started`` claim (its block raised, or the holder is gone).

    With ``expired_only``, only while its lease is expired by the store's clock: a
    holder on another host is judged by its lease alone, and may have renewed it since.
    """
    name = "drop_expired_once_claim" if expired_only else "drop_once_claim"
    with db.transaction() as tx:
        return tx.execute(name, {"run_id": run_id, "key": key, "holder": holder, "now": time.time()}).rowcount == 1


class OnceClaims(StorePart):
    """RunStore's ``Run.once`` claims: the functions above, on the store's database."""

    def claim_once(self, run_id: str, key: str, holder: str, lease_seconds: float) -> OnceClaim:
        """Claim ``Run.once``'s ``key`` for ``holder``, or say who holds it (lg_core.store._once_claims)."""
        return claim(self.db, run_id, key, holder, lease_seconds)

    def look_once(self, run_id: str, key: str) -> OnceClaim | None:
        """The ``Run.once`` claim on ``key`` as it stands (``done`` or ``held``), None when free."""
        return look(self.db, run_id, key)

    def finish_once(self, run_id: str, key: str, holder: str) -> bool:
        return finish(self.db, run_id, key, holder)

    def drop_once(self, run_id: str, key: str, holder: str | None, *, expired_only: bool = False) -> bool:
        return drop(self.db, run_id, key, holder, expired_only=expired_only)


__all__ = ["OnceClaim", "OnceClaims", "claim", "drop", "finish", "look"]
