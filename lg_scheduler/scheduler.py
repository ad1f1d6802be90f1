"""Scheduler: runs the recovery sweeps over one runtime, once or in a loop.

    scheduler = Scheduler(lg_core.current_runtime())
    scheduler.run_once()              # {"cancelled": 0, "partial": 0, "relayed": 2, ...}
    scheduler.run_forever(interval=1.0, stop=event)

``lg scheduler`` runs ``run_forever``; Celery beat can drive ``run_once``
instead through the ``lg.recover`` task (lg_scheduler.tasks). Running several
schedulers is safe: every sweep's writes are conditional (see recovery).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lg_core.errors import ConfigurationError, StoreUnavailableError
from lg_scheduler import recovery

if TYPE_CHECKING:
    from lg_core.runtime import Runtime
    from lg_core.store.retention import Position

log = logging.getLogger("lg_scheduler.scheduler")

DEFAULT_STALL_SECONDS = 600.0
COUNT_NAMES = (
    "cancelled",
    "partial",
    "relayed",
    "woken",
    "redispatched",
    "advanced",
    "orphaned",
    "sessions",
    "pruned",
    "errors",
)
# How often a scheduler with a run_retention prunes: old runs are not urgent, and a
# pass deletes at most an hour's worth of finished runs.
PRUNE_EVERY_SECONDS = 3600.0
# The most old runs one pass looks at (and so deletes), oldest first: a backlog (retention just
# turned on, a scheduler that was down, the kept runs of a batch that never finished) goes a
# slice per pass, each pass going on where the last one stopped, so ending runs, the relay and
# the lease sweep keep running.
PRUNE_LIMIT = 1000


class Scheduler:
    """The recovery loop of one process.

    ``stall_seconds``: a run with no commit for this long has its open steps that
    no sweep or holder sees to re-sent (a backstop behind the relay and the lease
    sweeper). ``hold_off``: how long a dead claim that was re-dispatched waits
    before it is re-dispatched again (default: the lease), doubling with each
    re-send no worker took, up to ``relay_backoff_max``. ``local_liveness``: treat
    a vanished holder process on this host as dead at once instead of waiting for
    its lease, a step's or a code-mode program holder's (turn off only to exercise
    the cross-host path). ``batch``: rows per sweep, so one pass stays short.
    ``lost_tasks``: told of each step taken from a dead holder, so monitoring ends
    the dead task (lg_scheduler.lost_tasks).
    """

    def __init__(
        self,
        runtime: Runtime,
        publisher: recovery.Publisher | None = None,
        *,
        stall_seconds: float = DEFAULT_STALL_SECONDS,
        hold_off: float | None = None,
        local_liveness: bool = True,
        batch: int = 500,
        lost_tasks: recovery.LostTaskReport | None = None,
    ) -> None:
        _positive("stall_seconds", stall_seconds)
        hold_off = runtime.configuration.lease_seconds if hold_off is None else hold_off
        _positive("hold_off", hold_off)
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ConfigurationError(f"batch must be a positive integer, got {batch!r}")
        self.runtime = runtime
        self.publisher = publisher if publisher is not None else _backend_publisher(runtime)
        self.stall_seconds = float(stall_seconds)
        self.hold_off = float(hold_off)
        self.local_liveness = bool(local_liveness)
        self.batch = batch
        self.lost_tasks = lost_tasks
        self._next_prune = 0.0  # monotonic time of the next retention pass: the first pass prunes
        # Leases and the store's outages (recovery.OutageGrace): the store's clock at the last lease
        # sweep; whether a pass found the store out of reach since; the grace that outage earned.
        self._last_lease_sweep: float | None = None
        self._store_was_down = False
        self._grace: recovery.OutageGrace | None = None
        self._prune_after: Position | None = None  # where the last retention pass stopped (None: the oldest)

    def run_once(self) -> dict[str, int]:
        """One pass of every sweep; returns what each did (``errors``: sweeps that raised).

        A sweep that fails (database or broker briefly unreachable) is logged and
        the others still run; nothing it skipped is lost, the next pass retries it.
        A sweep that found the run store out of reach (StoreUnavailableError,
        after its own few seconds of retries) ends the pass with one line in the
        log: every other sweep would wait out the same outage, each logging it.
        """
        counts = dict.fromkeys(COUNT_NAMES, 0)
        sweeps: list[tuple[tuple[str, ...], Callable[[], int | tuple[int, ...]]]] = [
            (("cancelled", "partial"), self._end_runs),
            (("relayed",), self._relay),
            (("woken",), self._wake_timed),
            (("redispatched",), self._sweep_leases),
            (("advanced", "orphaned"), self._detect_stalled),
            (("sessions",), self._activate_sessions),
            (("pruned",), self._prune),
        ]
        for names, sweep in sweeps:
            try:
                result = sweep()
            except StoreUnavailableError as exc:
                log.warning("recovery sweep %s: %s; this pass stops, the next one retries", "/".join(names), exc)
                counts["errors"] += 1
                self._store_was_down = True
                break
            except Exception:  # noqa: BLE001 - one failing sweep must not stop the others
                log.exception("recovery sweep %s failed; retrying on the next pass", "/".join(names))
                counts["errors"] += 1
                continue
            values = result if isinstance(result, tuple) else (result,)
            counts.update(zip(names, values, strict=True))
        return counts

    # Ending runs comes first, so a pass does not re-send steps of runs it is about to end.
    def _end_runs(self) -> tuple[int, int]:
        return recovery.end_runs(
            self.runtime.engine,
            self.runtime.store,
            local_liveness=self.local_liveness,
            limit=self.batch,
        )

    def _relay(self) -> int:
        return recovery.relay_outbox(
            self.runtime.store,
            self.publisher,
            limit=self.batch,
            holder_backoff=self.runtime.configuration.lease_seconds,
            grace=self._grace,
            local_liveness=self.local_liveness,
        )

    def _wake_timed(self) -> int:
        return recovery.wake_timed_steps(self.runtime.store, self.publisher, limit=self.batch)

    def _sweep_leases(self) -> int:
        now = self.runtime.store.clock()
        self._grant_outage_grace(now)
        swept = recovery.sweep_leases(
            self.runtime.store,
            self.publisher,
            hold_off=self.hold_off,
            local_liveness=self.local_liveness,
            limit=self.batch,
            now=now,
            grace=self._grace,
            lost=self.lost_tasks,
        )
        self._last_lease_sweep = now
        return swept

    def _grant_outage_grace(self, now: float) -> None:
        """After a pass found the store out of reach, spare the leases that outage let expire for one
        lease period from now (recovery.OutageGrace); drop a grace that has run out."""
        if self._store_was_down:
            self._store_was_down = False
            began = self._last_lease_sweep if self._last_lease_sweep is not None else float("-inf")
            lease = self.runtime.configuration.lease_seconds
            self._grace = recovery.OutageGrace(began=began, until=now + lease)
            log.info(
                "the run store answers again: leases that expired while it could not be reached are "
                "taken over only if not renewed within %.0f s (their holders could not renew them)",
                lease,
            )
        elif self._grace is not None and now >= self._grace.until:
            self._grace = None

    def _detect_stalled(self) -> tuple[int, int]:
        return recovery.detect_stalled(
            self.runtime.store, self.publisher, stall_seconds=self.stall_seconds, limit=self.batch
        )

    def _activate_sessions(self) -> int:
        return recovery.activate_sessions(self.runtime.engine, self.publisher, limit=self.batch)

    def _prune(self) -> int:
        """Apply the configured run_retention: a slice of at most PRUNE_LIMIT old runs per pass, going
        on each pass until a slice reaches the end, then again PRUNE_EVERY_SECONDS later from the oldest."""
        retention = self.runtime.configuration.run_retention
        if retention is None or time.monotonic() < self._next_prune:
            return 0
        from lg_core.retention import prune_runs

        report = prune_runs(
            retention, limit=PRUNE_LIMIT, after=self._prune_after, runtime=self.runtime
        )  # raising: tried again next pass
        self._prune_after = report.resume_after
        self._next_prune = time.monotonic() + (0.0 if report.resume_after is not None else PRUNE_EVERY_SECONDS)
        return report.runs

    def run_forever(self, interval: float = 1.0, stop: threading.Event | None = None) -> None:
        """Sweep every ``interval`` seconds until ``stop`` is set (forever without one)."""
        _positive("interval", interval)
        stop = stop if stop is not None else threading.Event()
        log.info("scheduler sweeping every %.2f s", interval)
        while not stop.is_set():
            counts = self.run_once()
            if any(counts.values()):
                log.info("recovery: %s", ", ".join(f"{k}={v}" for k, v in counts.items() if v))
            stop.wait(interval)


def _backend_publisher(runtime: Runtime) -> recovery.Publisher:
    return runtime.distributed_backend("the scheduler, which re-enqueues steps on Celery workers,")


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")


__all__ = ["COUNT_NAMES", "DEFAULT_STALL_SECONDS", "Scheduler"]
