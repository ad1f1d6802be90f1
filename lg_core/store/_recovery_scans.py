"""The scheduler's recovery scans (lg_scheduler.recovery): the outbox relay, the lease sweeper, the
stall detector and the ending of cancelled or overdue runs.

Each write is conditional, so several schedulers may run these at once: the
loser of a race simply gets nothing back.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lg_core.store import resend_backoff
from lg_core.store._rows import run_record, step_record
from lg_core.store._store_part import StorePart
from lg_core.store.records import RelayedStep, RunRecord, StepRecord
from lg_core.store.transient_errors import retry_transient


class RecoveryScans(StorePart):
    """RunStore's reads and conditional writes for the scheduler's recovery passes."""

    @retry_transient
    def relay_due_steps(
        self, limit: int = 500, backoff_max: Callable[[StepRecord], float] | None = None
    ) -> list[RelayedStep]:
        """Scheduled steps of running distributed runs whose ``dispatch_after`` passed, with their back-off.

        Each one's ``dispatch_after`` moves ahead by its back-off delay in the same
        transaction (a grace, doubling with each send nobody consumed, at most
        ``relay_backoff_max``, or ``backoff_max(step)`` when given:
        lg_core.store.resend_backoff), so the caller owns re-sending them until
        then. Due and ahead are by the store's clock (lg_core.store._clock),
        whichever host's messages these were.
        """
        grace = self.relay_grace
        cap_of = backoff_max or (lambda _step: self.relay_backoff_max)
        with self.db.transaction() as tx:
            rows = tx.fetchall("relay_due_steps", {"now": time.time(), "grace": grace, "limit": limit})
            sends = [(step_record(row[:-1]), int(row[-1])) for row in rows]
            relayed = [_relayed_step(step, count, grace, cap_of(step)) for step, count in sends]
            further = [
                {"run_id": step.run_id, "key": step.key, "relays": count, "delay": item.delay, "now": time.time()}
                for (step, count), item in zip(sends, relayed, strict=True)
                if item.delay > grace  # the UPDATE pushed it one grace: the rest of its back-off
            ]
            if further:
                tx.executemany("push_relayed_step", further)
        return relayed

    @retry_transient
    def wake_timed_steps(self, limit: int = 500) -> list[StepRecord]:
        """Parked steps whose ``wake_at`` passed (a subagent wait's long poll, a retry_delay), put back in the
        outbox for the caller to send now; the relay re-sends any whose message is lost."""
        with self.db.transaction() as tx:
            rows = tx.fetchall("wake_timed_steps", {"now": time.time(), "grace": self.relay_grace, "limit": limit})
        return [step_record(row) for row in rows]

    @retry_transient
    def clock(self) -> float:
        """Now, by the clock leases are written and judged by (epoch seconds): the PostgreSQL
        server's, or this host's for a SQLite store (lg_core.store._clock). The scheduler reads
        it once per pass to tell expired leases and passed deadlines."""
        with self.db.reader() as tx:
            return float(tx.fetchone("select_clock", {"now": time.time()})[0])

    @retry_transient
    def running_steps(self, limit: int = 1000) -> list[tuple[StepRecord, int]]:
        """Running steps of running distributed runs, except those re-dispatched within their back-off,
        each with its ``relays``: the lease sweeper's re-sends of it since its last claim."""
        with self.db.reader() as tx:
            rows = tx.fetchall("select_running_steps", {"now": time.time(), "limit": limit})
        return [(step_record(row[:-1]), int(row[-1])) for row in rows]

    @retry_transient
    def mark_redispatched(self, step: StepRecord, relays: int, hold_off: float) -> RelayedStep | None:
        """Record that the dead claim of ``step`` (read with its ``relays``) is re-sent now, and its back-off.

        The first re-send after a claim delivers the step and is due again a
        ``hold_off`` later; each later one is a miss, and the wait doubles up to
        ``relay_backoff_max`` (lg_core.store.resend_backoff, with ``hold_off`` as
        the grace). None when the step changed since it was read (claimed, ended,
        or re-sent by another scheduler): the caller must not send it.
        """
        item = _relayed_step(step, relays + 1, hold_off, self.relay_backoff_max)
        params = {
            "run_id": step.run_id,
            "key": step.key,
            "holder": step.holder or "",
            "relays": relays,
            "now": time.time(),
            "delay": item.delay,
        }
        with self.db.transaction() as tx:
            return item if tx.execute("resweep_step", params).rowcount == 1 else None

    @retry_transient
    def open_steps_tracked(self, run_id: str) -> list[tuple[StepRecord, bool]]:
        """A run's open steps, each with whether a sweep or a holder already sees to it.

        Tracked: sent by the outbox relay or the lease sweeper, which back it off
        (``relays`` > 0), or running under a lease that has not expired (by the
        store's clock). The stall detector re-sends only the others.
        """
        with self.db.reader() as tx:
            rows = tx.fetchall("select_open_steps_tracked", {"run_id": run_id, "now": time.time()})
        return [(step_record(row[:-1]), bool(row[-1])) for row in rows]

    @retry_transient
    def touch_stalled_runs(self, stall_seconds: float, limit: int = 500) -> list[str]:
        """Ids of at most ``limit`` running distributed runs with no commit for ``stall_seconds``
        (the longest quiet first); each is touched so it waits again."""
        now = time.time()
        with self.db.transaction() as tx:
            rows = tx.fetchall("touch_stalled_runs", {"now": now, "cutoff": now - stall_seconds, "limit": limit})
        return [row[0] for row in rows]

    @retry_transient
    def runs_to_end(self, limit: int = 500) -> list[RunRecord]:
        """Distributed runs to end: running with a cancel request or a passed deadline (by the store's
        clock), or pending past it."""
        with self.db.reader() as tx:
            rows = tx.fetchall("select_runs_to_end", {"now": time.time(), "limit": limit})
        return [run_record(row) for row in rows]


def _relayed_step(step: StepRecord, sends: int, grace: float, cap: float) -> RelayedStep:
    missed = resend_backoff.misses(sends, step)
    return RelayedStep(
        step,
        missed,
        resend_backoff.delay(missed, grace, cap),
        resend_backoff.waited(missed, grace, cap),
        resend_backoff.new_level(missed, grace, cap),
    )


__all__ = ["RecoveryScans"]
