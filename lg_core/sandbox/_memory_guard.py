"""Sampled memory supervision of a process tree, for hosts without a memory cgroup.

The guard sums the resident memory of the child and every visible descendant every
100 ms and ends the tree when the sum passes the limit. It can miss a peak between
two samples; an outer cgroup or container is what enforces memory as a hard limit.
When it can no longer see the tree (three failed samples in a row) it ends the tree
too: a supervision that cannot observe must not let the child run unobserved.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

SAMPLE_SECONDS = 0.1
FAILURES_BEFORE_STOP = 3
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

MemoryReader = Callable[[int], int]


def process_tree_rss(root_pid: int) -> int:
    """Resident bytes of ``root_pid`` and its descendants, from a Linux ``/proc`` snapshot."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    total = _resident_bytes(root_pid, required=True)
    pending = list(children.get(root_pid, ()))
    while pending:
        pid = pending.pop()
        total += _resident_bytes(pid, required=False)
        pending.extend(children.get(pid, ()))
    return total


def _resident_bytes(pid: int, required: bool) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        if required:
            raise
        return 0


class MemoryGuard:
    """Samples a tree's memory on a thread and calls ``on_violation`` once when it must end."""

    def __init__(
        self,
        pid: int,
        limit: int,
        on_violation: Callable[[str, int | None], None],
        reader: MemoryReader | None = None,
        still_running: Callable[[], bool] = lambda: True,
    ) -> None:
        self._pid = pid
        self._limit = limit
        self._on_violation = on_violation
        self._reader = reader or process_tree_rss
        self._still_running = still_running
        self.peak = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sandbox-memory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        failures = 0
        while not self._stopped.wait(SAMPLE_SECONDS):
            if not self._still_running():
                return
            try:
                used = self._reader(self._pid)
            except Exception:
                failures += 1
                if failures >= FAILURES_BEFORE_STOP and self._still_running():
                    self._on_violation("memory supervision could not read the process tree", None)
                    return
                continue
            failures = 0
            self.peak = max(self.peak, used)
            if used > self._limit:
                self._on_violation(f"memory use {used} bytes went past the limit of {self._limit} bytes", used)
                return

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
