"""Holder leases: a process's own lease, renewed while it holds code-mode programs.

A code-mode program is a child of the worker process that started it, and the
``wait`` or ``stop`` after it is sent to that process's own queue
(lg_workers._program_home). If the process dies, nothing consumes that queue
again, so the scheduler must tell, from whatever host it runs on, that the
process is gone and send the step to plain ``lg.sandbox`` instead. A process
id says so only on its own host; this row says so everywhere: its process
renews the lease every third of a lease period while it holds programs
(lg_core.engine.leases.Heartbeat), so a lease that ran out (by the store's
clock) means the process died, was cut off from the store for a whole lease, or
no longer holds any program, and in each case a ``wait`` in its queue would
never be answered by it.

A row of its own, not the lease of the ``exec`` step that started the program:
that step is finished (its lease cleared by its commit), a process holds many
programs of many runs under one queue, and the ``wait`` knows only the holder
string its queue is named for. One row per process keeps the renewal one
statement however many programs it holds, and the lookup one primary-key read.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from lg_core.store._store_part import StorePart
from lg_core.store.transient_errors import retry_transient


class HolderLeases(StorePart):
    """RunStore's holder leases: renewed by the process they name, read by the scheduler."""

    @retry_transient
    def renew_holder_lease(self, holder: str, lease_seconds: float) -> None:
        """Extend (or start) ``holder``'s own lease to ``lease_seconds`` from now by the store's clock.

        Only the process ``holder`` names writes its row, so an update that finds
        none is followed by an insert without a race with another writer (a
        duplicate key from a concurrent retry of its own is retried, and updates).
        """
        params = {"holder": holder, "lease_seconds": lease_seconds, "now": time.time()}
        with self.db.transaction() as tx:
            if tx.execute("renew_holder_lease", params).rowcount == 0:
                tx.execute("insert_holder_lease", params)

    @retry_transient
    def drop_holder_lease(self, holder: str) -> None:
        """Remove ``holder``'s lease: it holds no program any more, so nothing may wait on it."""
        with self.db.transaction() as tx:
            tx.execute("drop_holder_lease", {"holder": holder})

    @retry_transient
    def drop_stale_holder_leases(self, age: float) -> int:
        """Remove the leases that ran out at least ``age`` seconds ago (by the store's clock); how many.

        A process drops its own lease when it stops holding programs; one that
        died leaves its row behind. An expired row and a missing one mean the
        same (the holder is gone), so removing it changes no verdict once it is
        older than any outage's grace could spare it.
        """
        with self.db.transaction() as tx:
            return tx.execute("drop_stale_holder_leases", {"age": age, "now": time.time()}).rowcount

    @retry_transient
    def holder_leases(self, holders: Collection[str]) -> dict[str, float]:
        """Until when (the store's clock, as :meth:`clock` reads it) each of ``holders`` that has a lease
        holds it; a holder without a row is left out (it holds no program, or never said it did)."""
        found: dict[str, float] = {}
        with self.db.reader() as tx:
            for holder in sorted(set(holders)):
                row = tx.fetchone("select_holder_lease", {"holder": holder})
                if row is not None:
                    found[holder] = float(row[0])
        return found


__all__ = ["HolderLeases"]
