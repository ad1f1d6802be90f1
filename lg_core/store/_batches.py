"""Batch rows (lg_scheduler.batch): one per batch, its counts written by the submitter holding it."""

from __future__ import annotations

import time
from typing import Any

from lg_core.store._statement_parts import BATCH_COLUMNS
from lg_core.store._store_part import StorePart
from lg_core.store.records import BatchRecord
from lg_core.store.transient_errors import retry_transient


class Batches(StorePart):
    """RunStore's batch rows."""

    @retry_transient
    def open_batch(self, batch: dict[str, Any]) -> tuple[BatchRecord, bool]:
        """Insert a batch row (id, agent, input_hash, input_path, total, holder) unless it exists.

        Returns the stored row and whether this call created it.
        """
        now = time.time()
        with self.db.transaction() as tx:
            row = tx.fetchone("select_batch", {"batch_id": batch["id"]})
            if row is not None:
                return BatchRecord(*row), False
            values: dict[str, Any] = {name: None for name in BATCH_COLUMNS}
            values.update(
                batch, status="running", completed=0, failed=0, invalid=0, running=0, created_at=now, updated_at=now
            )
            tx.execute("insert_batch", values)
        return BatchRecord(**values), True

    @retry_transient
    def claim_batch(self, batch_id: str, holder: str, previous: str | None, total: int) -> bool:
        """Make ``holder`` the batch's submitter if it has none or ``previous`` had it."""
        with self.db.transaction() as tx:
            params = {
                "batch_id": batch_id,
                "holder": holder,
                "previous": previous or "",
                "total": total,
                "now": time.time(),
            }
            return tx.execute("claim_batch", params).rowcount == 1

    @retry_transient
    def update_batch(
        self, batch_id: str, holder: str, counts: dict[str, int], *, finished: bool = False, release: bool = False
    ) -> bool:
        """Record the submitter's counts (completed, failed, invalid, running); only while it holds the batch."""
        now = time.time()
        params = {
            "batch_id": batch_id,
            "holder": holder,
            **{name: int(counts.get(name, 0)) for name in ("completed", "failed", "invalid", "running")},
            "status": "finished" if finished else "running",
            "next_holder": None if finished or release else holder,
            "now": now,
            "finished_at": now if finished else None,
        }
        with self.db.transaction() as tx:
            return tx.execute("update_batch", params).rowcount == 1

    @retry_transient
    def load_batch(self, batch_id: str) -> BatchRecord | None:
        with self.db.reader() as tx:
            row = tx.fetchone("select_batch", {"batch_id": batch_id})
        return None if row is None else BatchRecord(*row)

    @retry_transient
    def list_batches(self, limit: int = 20) -> list[BatchRecord]:
        with self.db.reader() as tx:
            rows = tx.fetchall("select_batches", {"limit": limit})
        return [BatchRecord(*row) for row in rows]


__all__ = ["Batches"]
