"""One lock per frame for this process's commits to it, taken by parallel tool calls.

The tool calls of one turn run on several threads and each commit moves their
shared frame, under its optimistic version. Without a lock they
commit all at once and all but one lose: each loser re-reads the frame, builds
its commit again and tries again, and on a turn of 60 calls on 16 threads that
was 5 lost races per call. Holding the frame's lock, a call builds its commit
from the frame as this process's last commit left it, so siblings in one
process do not race at all; the version check still decides against other
processes (a worker fleet), which retry as before.

A lock lives while some thread holds or waits for it, so the table stays as
small as the number of frames committing right now.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class FrameLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, list[int]]] = {}

    @contextmanager
    def hold(self, frame_id: str) -> Iterator[None]:
        """Hold ``frame_id``'s lock: at most one thread of this process commits to the frame."""
        with self._guard:
            lock, users = self._locks.setdefault(frame_id, (threading.Lock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._guard:
                users[0] -= 1
                if users[0] == 0:
                    del self._locks[frame_id]

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


__all__ = ["FrameLocks"]
