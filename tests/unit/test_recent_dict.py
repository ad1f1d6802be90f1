"""RecentDict keeps the most recently written entries, up to its capacity."""

from __future__ import annotations

import threading

import pytest

from lg_core.engine.recent_dict import RecentDict


def test_the_oldest_written_entry_goes_first():
    recent: RecentDict[str, int] = RecentDict(2)
    recent["a"] = 1
    recent["b"] = 2
    recent["a"] = 3  # rewriting makes "a" the newest
    recent["c"] = 4

    assert list(recent) == ["a", "c"]
    assert recent.get("b", "missing") == "missing"
    assert recent.get("a", None) == 3


def test_pop_and_discard_where_forget_entries():
    recent: RecentDict[tuple[str, str], int] = RecentDict(10)
    for run in ("r1", "r2"):
        for step in ("s1", "s2"):
            recent[(run, step)] = 0

    recent.discard_where(lambda key: key[0] == "r1")

    assert sorted(recent) == [("r2", "s1"), ("r2", "s2")]
    assert recent.pop(("r2", "s1"), None) == 0
    assert recent.pop(("r2", "s1"), None) is None
    assert len(recent) == 1


def test_many_threads_writing_never_exceed_the_capacity():
    recent: RecentDict[int, int] = RecentDict(16)

    def write(offset: int) -> None:
        for n in range(2000):
            recent[offset + n] = n

    threads = [threading.Thread(target=write, args=(10_000 * t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(recent) == 16


def test_a_capacity_below_one_is_refused():
    with pytest.raises(ValueError):
        RecentDict(0)
