"""RecentDict: a mapping that keeps only its most recently written entries.

The engine remembers small facts about runs in flight (a successor's input,
when a run's cancel flag was last polled, how many interjections a run has
pending). A run's final commit clears them, but a long-lived process often
never makes that commit: a tools worker, or the client that started a run on
the workers. Those facts are all hints (a missing one means "read the store"),
so the engine keeps them in a RecentDict and forgets the oldest instead of
growing with every run the process has ever seen.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

# Runs a process keeps in memory between their steps (the engine's Run cache and
# its per-run hints). While a worker has fewer runs in flight, a step finds its Run
# cached instead of reloading it (~1.25 ms on PostgreSQL). A cached Run costs about
# 6 KiB, so a full cache of the default adds ~6 MiB to a worker process.
DEFAULT_RUN_CACHE_SIZE = 1024


class RecentDict(Generic[K, V]):
    """At most ``capacity`` entries; writing an entry makes it the newest, the oldest go first.

    Reads do not refresh an entry: every fact kept here is rewritten by each
    step that uses it, so write order is close to use order and reads stay a
    plain lookup. Thread-safe (a worker runs steps on many threads).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._data: OrderedDict[K, V] = OrderedDict()

    def __setitem__(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            if len(self._data) > self.capacity:
                self._data.popitem(last=False)

    def get(self, key: K, default: D) -> V | D:
        return self._data.get(key, default)

    def pop(self, key: K, default: D) -> V | D:
        with self._lock:
            return self._data.pop(key, default)

    def discard_where(self, predicate: Callable[[K], bool]) -> None:
        """Drop every entry whose key matches (e.g. all steps of one run)."""
        with self._lock:
            for key in [k for k in self._data if predicate(k)]:
                del self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[K]:
        with self._lock:
            return iter(list(self._data))


__all__ = ["DEFAULT_RUN_CACHE_SIZE", "RecentDict"]
