"""How a reader, or a step's commit, waits out a run store it cannot reach for a while (a database restart or failover).

A store transaction retries transient errors for a few seconds
(:func:`~lg_core.store.transient_errors.retry_transient`), which covers a dropped
connection but not a database that takes ten seconds to come back. A reader
that follows a run (``Execution.events()``, a Server-Sent Events endpoint) or
waits for it (``Execution.wait``) can afford to wait longer: the run goes on
as soon as the database is back, so giving up would only turn an outage the
workers ride out into an error in every web request watching a run. So the
reader keeps trying, pausing longer each time, until the database answers or
its own time runs out (a ``wait`` timeout). Errors that are not transient
(a wrong password, a missing table) are raised at once. A store call that
spent its own retries raises StoreUnavailableError, which counts as transient
here: the reader's wait is longer than the call's.

A step's commit waits too (:func:`call_through_outage`), as do the store
reads a step makes on its way (interjections that arrived), for the same
reason and one more: the step's work is done. A model turn that streamed
its answer, or a tool call that charged a card, just before the database
went away is committed once it is back, instead of its attempt failing and
the step running again (paid for twice, or an ``at_most_once`` call ending
"outcome unknown"). The commit is safe to send again: it is guarded by the
step's claim and the frame's version, and a try that was applied although
its answer was lost is recognised (``RunStore.commit``'s ``now``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from lg_core.errors import DeadlineExceededError, StoreUnavailableError
from lg_core.store.transient_errors import is_transient

T = TypeVar("T")

log = logging.getLogger(__name__)

FIRST_PAUSE_SECONDS = 0.1  # the pause after the first failed try, doubling ...
MAX_PAUSE_SECONDS = 2.0  # ... up to this: a database back from a restart is seen within 2 s


class StoreOutage:
    """One reader's tries at a store call that keeps failing, and the pauses between them.

    ``subject`` names the reader in its messages ("run R", "batch B").
    ``limit`` (a ``time.monotonic()`` instant, or None for no limit) is the
    reader's own deadline: a pause that would end after it raises
    DeadlineExceededError instead, as the reader would have raised at that
    instant had the store answered.
    """

    def __init__(self, subject: str, limit: float | None) -> None:
        self.subject = subject
        self.limit = limit
        self.started = time.monotonic()
        self.failures = 0
        self._pause = FIRST_PAUSE_SECONDS

    def pause_after(self, error: Exception) -> float:
        """Seconds to wait before the next try after ``error``; raises it when it is not transient."""
        if not is_transient(error):
            raise error
        self.failures += 1
        pause, self._pause = self._pause, min(self._pause * 2, MAX_PAUSE_SECONDS)
        if self.limit is not None and time.monotonic() + pause >= self.limit:
            raise DeadlineExceededError(
                f"{self.subject}: the run store could not be reached for {self.elapsed():.1f} s ({error}) "
                "and the wait's time is up; the run keeps going once the database is back"
            ) from error
        if self.failures == 1:
            log.warning("%s: the run store cannot be reached (%s); trying again until it answers", self.subject, error)
        return pause

    def ended(self) -> None:
        """The store answered again after this outage."""
        log.info("%s: the run store answers again after %.1f s", self.subject, self.elapsed())

    def elapsed(self) -> float:
        return time.monotonic() - self.started


# The loops below are hand-written, not tenacity: StoreOutage.pause_after makes "try again?", "how long?" and
# "past the reader's deadline?" one decision, raising the error or DeadlineExceededError in place of a pause.
def read_through_outage(
    read: Callable[[], T], run_id: str, limit: float | None, sleep: Callable[[float], object] = time.sleep
) -> T:
    """``read()``, tried again after a transient failure until it answers or ``limit`` passes.

    ``sleep`` pauses between tries (a caller with a cancellation token passes one that
    raises when the token is cancelled).
    """
    outage: StoreOutage | None = None
    while True:
        try:
            answer = read()
        except Exception as error:  # noqa: BLE001 - pause_after re-raises what is not transient
            outage = outage or StoreOutage(f"run {run_id}", limit)
            sleep(outage.pause_after(error))
            continue
        if outage is not None:
            outage.ended()
        return answer


async def aread_through_outage(read: Callable[[], T], run_id: str, limit: float | None) -> T:
    """:func:`read_through_outage` for async code: ``read`` runs on a worker thread, pauses are awaited."""
    outage: StoreOutage | None = None
    while True:
        try:
            answer = await asyncio.to_thread(read)
        except Exception as error:  # noqa: BLE001 - pause_after re-raises what is not transient
            outage = outage or StoreOutage(f"run {run_id}", limit)
            await asyncio.sleep(outage.pause_after(error))
            continue
        if outage is not None:
            outage.ended()
        return answer


def call_through_outage(
    write: Callable[[], T], subject: str, patience: float, sleep: Callable[[float], object] = time.sleep
) -> T:
    """``write()`` (a store call), tried again while the store is out of reach, for up to ``patience`` seconds.

    Only StoreUnavailableError is waited out: ``write`` has retried contention
    and short drops itself, and any other error is the call's own answer.
    Past ``patience`` the last StoreUnavailableError is raised (0: at once,
    as ``write`` raised it). A write must be safe to send again after it
    raised: that call may have been applied.
    """
    outage: StoreOutage | None = None
    while True:
        try:
            answer = write()
        except StoreUnavailableError as error:
            outage = outage or StoreOutage(subject, None)
            if outage.elapsed() >= patience:
                raise
            sleep(min(outage.pause_after(error), max(patience - outage.elapsed(), 0.0)))
            continue
        if outage is not None:
            outage.ended()
        return answer


__all__ = [
    "FIRST_PAUSE_SECONDS",
    "MAX_PAUSE_SECONDS",
    "StoreOutage",
    "aread_through_outage",
    "read_through_outage",
    "call_through_outage",
]
