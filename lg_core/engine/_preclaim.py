"""A successor claimed by the commit that schedules it.

A worker that runs a step's successor itself (lg_workers.continuation) would
otherwise claim it in a transaction of its own right after the commit that
wrote it: one more round trip to the store per step, on the step's path. So
the engine asks the caller, while it builds the commit, which new step it will
run next (``Follow``), and the commit inserts that row already claimed for this
process (attempt 1, a lease, out of the outbox). The commit also carried what a
claim reads (the run's cancel flag and pending interjections) and left the
frame in this process's cache, so the successor starts with no store read.

Why it is as safe as a claim: the claimed row is written in the same
transaction as the commit, so it exists exactly when the commit does; its
holder and lease are the ones a claim would write, so a process that dies
before running it leaves a step that recovery treats like any step held by a
dead process (the sweeper, a redelivered message's re-announce).

The record is per thread: the chain that asked for the claim runs it next on
the same thread (``Engine.execute_claimed`` takes it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lg_core.engine._frames import FrameState
from lg_core.engine.dispatcher import StepRef

# Given the new steps a commit schedules (of the committing frame), the one the caller
# will run next on this thread, or None.
Follow = Callable[[list[StepRef]], StepRef | None]


@dataclass(frozen=True, slots=True)
class Preclaimed:
    """A step its scheduling commit claimed for this thread to run next."""

    ref: StepRef
    input: dict[str, Any] | None
    frame: FrameState | None  # as the commit left it (None: no longer cached, read it)
    claimed_at: float  # time.monotonic() before the commit was sent: the lease runs from no earlier
    cancel_requested: bool


class PreclaimSlot(threading.local):
    """The one pre-claimed step of each thread, until that thread runs it."""

    current: Preclaimed | None = None

    def put(self, preclaimed: Preclaimed) -> None:
        self.current = preclaimed

    def take(self, run_id: str, key: str) -> Preclaimed | None:
        """The pre-claim of step ``key`` of ``run_id`` made on this thread, once.

        The slot is emptied whatever the step: a pre-claim is for the thread's very
        next step. One left behind (its task failed before running it) is not used
        later, when its step may come back by the sweeper with another frame.
        """
        current, self.current = self.current, None
        if current is None or (current.ref.run_id, current.ref.key) != (run_id, key):
            return None
        return current


__all__ = ["Follow", "PreclaimSlot", "Preclaimed"]
