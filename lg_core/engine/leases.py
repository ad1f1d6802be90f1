"""Lease renewal for steps this process is executing.

A claim gives the holder a lease of ``lease_seconds``. A step that runs longer
(a long streamed answer, a slow tool) keeps its lease alive from this
heartbeat, which renews the leases of the steps this process is executing, in
one transaction every third of a lease. If the process dies the heartbeat
stops, the lease expires, and the sweeper re-dispatches the step. A renewal
sends ``lease_seconds``, not an expiry: the store times it by its own clock
(PostgreSQL's; lg_core.store._clock), so this host's clock does not matter.

A renewal that finds a step no longer held by this attempt (its lease expired
while the process was slow, and another worker, or another thread here, claimed
it) marks it lost, and
the step stops at its next check (``check``, from ``StepScope.check_interrupt``):
its commit would be refused anyway, and meanwhile it would stream a second copy
of the answer into the run's live stream, interleaved with the new holder's.
A beat may come too late for that (the process was paused, or its renewals
failed, for a whole lease): so ``check`` also knows, by this host's monotonic
clock, until when the last claim or renewal surely holds, and past it confirms
the claim with a renewal of its own before the step goes on.

A confirmation the store cannot answer (a database restart or failover, a
lock) pauses the step instead of stopping it: the confirmation is tried
again every CONFIRM_RETRY_SECONDS, for up to the engine's
``store_outage_patience``, and the step goes on once a renewal says it still
holds the step (or stops if another claim holds it now). The step streams
nothing meanwhile, so no delta of a superseded attempt can follow another
worker's claim. Stopping at once would abandon every model turn that
streams for longer than its lease through a database outage.

Only the steps being executed: a step this process claimed but no longer
executes (its attempt failed and could not be given back, a claim whose
transaction was retried after it had committed) must see its lease expire
even while the process executes other steps, or nothing would ever take it over.

The same beat renews this process's own holder lease (lg_core.store._holder_leases)
while it holds code-mode programs (:meth:`Heartbeat.keep_holder_lease`): the
``wait`` of such a program can only be answered here, and the lease is how a
scheduler on any host tells that this process is gone. A process that holds no
program writes nothing, and drops its lease once it stops holding any.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lg_core.errors import StoreUnavailableError
from lg_core.lease_holders import current_holder
from lg_core.store import RunStore
from lg_core.store.transient_errors import is_transient

log = logging.getLogger(__name__)

CONFIRM_RETRY_SECONDS = 1.0  # a step's confirmation the store could not answer is tried again after this
# A holder lease expired this long ago belongs to a process that died without dropping it; a day is past
# any store outage whose grace could still spare it (lg_scheduler.recovery.OutageGrace).
STALE_HOLDER_LEASE_SECONDS = 86400.0


class StepClaimLost(BaseException):  # noqa: N818 - a control-flow signal like CancelledError, not an error
    """The step this process executes is held by another process now: stop working on it.

    A BaseException, like CancelledError: a callback's ``except Exception`` must not
    turn it into the run's failure (the run goes on under the new holder).
    """


class StepNotClaimed(StoreUnavailableError):
    """The store could not be reached to claim a step: nothing of the step ran here.

    The claim is the first thing an attempt writes, so a task that raised this
    may simply be sent again (lg_workers retries it after a short pause) rather
    than wait for the outbox relay's ``relay_grace`` once the database is back.
    """

    run_id: str  # set by the engine (lg_core.errors.Error keeps keyword attributes, pickling too)
    key: str


class Heartbeat:
    def __init__(self, store: RunStore, lease_seconds: float, patience: float) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self.patience = (
            patience  # how long a step's confirmation waits for a store out of reach (store_outage_patience)
        )
        # (run id, step key, attempt or None) executing here
        self._held: Counter[tuple[str, str, int | None]] = Counter()
        self._lost: set[tuple[str, str, int | None]] = set()  # executing here, but held by another claim now
        # Until when (time.monotonic) each one's lease surely runs: the claim's or the last renewal's
        # start plus the lease, so never past the expiry the store wrote.
        self._valid: dict[tuple[str, str, int | None], float] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid_holder: str | None = None
        # While set and true, this process holds something only it can serve (code-mode programs): its
        # holder lease is renewed. The lock orders a renewal after a drop, never a drop after a renewal.
        self._holds: Callable[[], bool] | None = None
        self._holder_lease_lock = threading.Lock()

    @contextmanager
    def holding(
        self, run_id: str, key: str, attempt: int | None = None, claimed_at: float | None = None
    ) -> Iterator[None]:
        """Keep the lease of step ``key`` of ``run_id`` alive while the block runs (only while
        its claim is ``attempt``, when given). ``claimed_at``: ``time.monotonic()`` read before
        the claim was sent (default: now)."""
        step = (run_id, key, attempt)
        with self._lock:
            if not self._held[step]:
                self._lost.discard(step)  # a new claim: whatever was lost before is this one's no more
                self._valid[step] = (time.monotonic() if claimed_at is None else claimed_at) + self.lease_seconds
            self._held[step] += 1
            self._ensure_thread()
        try:
            yield
        finally:
            with self._lock:
                self._held[step] -= 1
                if self._held[step] <= 0:
                    del self._held[step]
                    self._lost.discard(step)
                    self._valid.pop(step, None)

    def check(self, run_id: str, key: str, attempt: int | None = None) -> None:
        """Raise StepClaimLost when this attempt of step ``key`` is held by another claim now,
        or its lease may have run out and a renewal cannot confirm it still holds it."""
        step = (run_id, key, attempt)
        if step in self._lost:
            raise StepClaimLost(f"step {key} of run {run_id} was taken over by another worker after its lease expired")
        valid = self._valid.get(step)
        if valid is not None and time.monotonic() >= valid:
            self._confirm(step)

    def _confirm(self, step: tuple[str, str, int | None]) -> None:
        """Renew ``step``'s lease now, from the step's own thread; StepClaimLost if it is not held here.

        While the store cannot answer (see the module's docstring) the step
        waits here, trying again every CONFIRM_RETRY_SECONDS for up to
        ``patience`` seconds; any other failure, or a store still out of reach
        after that, stops it with StepClaimLost, since another worker may hold it.
        """
        # Hand-written, not tenacity: a failure is sorted into StepClaimLost, not re-raised, and its patience
        # counts from the first failure, not the first try.
        waiting_since: float | None = None
        while True:
            started = time.monotonic()
            try:
                lost = self.store.renew_leases_once(current_holder(), self.lease_seconds, [step])
                break
            except Exception as exc:  # noqa: BLE001 - sorted below
                first = waiting_since is None
                if waiting_since is None:  # ``first``, spelled out so that mypy narrows waiting_since
                    waiting_since = started
                if not is_transient(exc) or started - waiting_since >= self.patience:
                    raise StepClaimLost(
                        f"step {step[1]} of run {step[0]}: its lease ran out and could not be renewed ({exc!r})"
                    ) from None
                if first:
                    log.warning(
                        "step %s of run %s: its lease ran out and the store cannot renew it now (%s); the step "
                        "waits until the store confirms it still holds it",
                        step[1],
                        step[0],
                        " ".join(str(exc).split()),
                    )
            time.sleep(CONFIRM_RETRY_SECONDS)
        if waiting_since is not None:
            log.info(
                "step %s of run %s: the store answers again after %.1f s",
                step[1],
                step[0],
                time.monotonic() - waiting_since,
            )
        self._renewed([step], lost, started)
        self.check(*step)

    def _renewed(self, held: list[tuple[str, str, int | None]], lost: list[Any], started: float) -> None:
        """Record a renewal of ``held`` sent at ``started`` (monotonic) that found ``lost`` taken over."""
        with self._lock:
            for step in held:
                if step not in self._held:
                    continue
                if step in lost:
                    self._lost.add(step)
                else:
                    self._valid[step] = max(self._valid.get(step, 0.0), started + self.lease_seconds)

    def executing_runs(self) -> set[str]:
        """The runs with a step (or a Run.once block) executing in this process now."""
        with self._lock:
            return {run_id for run_id, _key, _attempt in self._held}

    def _ensure_thread(self) -> None:
        holder = current_holder()
        if self._thread is not None and self._thread.is_alive() and self._pid_holder == holder:
            return
        self._pid_holder = holder
        self._thread = threading.Thread(target=self._beat, name="lg-heartbeat", daemon=True)
        self._thread.start()

    def keep_holder_lease(self, holds: Callable[[], bool]) -> None:
        """Renew this process's holder lease now and at every beat for as long as ``holds()`` is true.

        Called by a step that leaves a code-mode program running, before its
        commit names this process as the program's holder, so the lease exists
        by the time a ``wait`` is sent here. A renewal that fails is logged and
        tried again at the next beat (a third of a lease later). Once ``holds()``
        is false the beat drops the lease and writes nothing more.
        """
        with self._holder_lease_lock:
            if self._holds is None:
                self._holds = holds
                try:
                    self.store.renew_holder_lease(current_holder(), self.lease_seconds)
                    # The rows dead processes left: cleared by whoever starts holding programs, so the
                    # table stays as small as the fleet without a sweep of its own.
                    self.store.drop_stale_holder_leases(STALE_HOLDER_LEASE_SECONDS)
                except Exception:  # noqa: BLE001 - the next beat tries again
                    log.warning("could not write this process's holder lease; the next beat tries again", exc_info=True)
            with self._lock:
                self._ensure_thread()

    def _beat_holder_lease(self) -> None:
        """Renew the holder lease while this process holds programs; drop it once it holds none."""
        with self._holder_lease_lock:
            holds = self._holds
            if holds is None:
                return
            try:
                if holds():
                    self.store.renew_holder_lease(current_holder(), self.lease_seconds)
                else:
                    self._holds = None
                    self.store.drop_holder_lease(current_holder())
            except Exception:  # noqa: BLE001 - a missed beat only shortens the lease; a row left expires
                log.debug("could not renew or drop this process's holder lease", exc_info=True)

    def _beat(self) -> None:
        interval = max(self.lease_seconds / 3, 0.05)
        while not self._wake.wait(interval):
            self._beat_holder_lease()
            with self._lock:
                held = list(self._held)
            if held:
                started = time.monotonic()
                try:
                    lost = self.store.renew_leases(current_holder(), self.lease_seconds, held)
                except Exception:  # noqa: BLE001 - a missed beat only shortens the lease
                    continue
                self._renewed(held, lost, started)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop beating and wait for a beat in progress: the store may be closed next."""
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


__all__ = ["Heartbeat", "StepClaimLost", "StepNotClaimed"]
