"""Lease renewal for steps this process is executing (DESIGN 4.2).

A claim gives the holder a lease of ``lease_seconds``. A step that runs longer
(a long streamed answer, a slow tool) keeps its lease alive from this
heartbeat, which renews every lease held by this process in one statement
every third of a lease. If the process dies the heartbeat stops, the lease
expires, and the sweeper re-dispatches the step.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from lg_core.identity import current_holder
from lg_core.store import RunStore


class Heartbeat:
    def __init__(self, store: RunStore, lease_seconds: float) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self._held = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid_holder: str | None = None

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Keep this process's leases alive while the block runs."""
        with self._lock:
            self._held += 1
            self._ensure_thread()
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1

    def _ensure_thread(self) -> None:
        holder = current_holder()
        if self._thread is not None and self._thread.is_alive() and self._pid_holder == holder:
            return
        self._pid_holder = holder
        self._thread = threading.Thread(target=self._beat, name="lg-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        interval = max(self.lease_seconds / 3, 0.05)
        while not self._wake.wait(interval):
            with self._lock:
                busy = self._held > 0
            if busy:
                try:
                    self.store.renew_leases(current_holder(), self.lease_seconds)
                except Exception:  # noqa: BLE001 - a missed beat only shortens the lease
                    pass

    def stop(self) -> None:
        self._wake.set()


__all__ = ["Heartbeat"]
