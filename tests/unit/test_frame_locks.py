"""FrameLocks: one lock per frame, kept only while a thread holds or waits for it."""

from __future__ import annotations

import threading
import time

from lg_core.engine._frame_locks import FrameLocks


def test_one_frame_is_held_by_one_thread_at_a_time_and_others_are_not_held_up():
    locks = FrameLocks()
    inside: list[str] = []
    overlaps: list[int] = []
    release = threading.Event()

    def commit(frame_id: str) -> None:
        with locks.hold(frame_id):
            inside.append(frame_id)
            overlaps.append(inside.count(frame_id))
            release.wait(5)
            inside.remove(frame_id)

    threads = [threading.Thread(target=commit, args=(frame,)) for frame in ("a", "a", "a", "b")]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while sorted(inside) != ["a", "b"] and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sorted(inside) == ["a", "b"]  # another frame's commit runs beside frame a's
    release.set()
    for thread in threads:
        thread.join(5)
    assert overlaps == [1, 1, 1, 1]
    assert len(locks) == 0


def test_a_lock_is_dropped_when_its_holder_raises():
    locks = FrameLocks()
    try:
        with locks.hold("a"):
            raise ValueError("a failed commit")
    except ValueError:
        pass
    assert len(locks) == 0
    with locks.hold("a"):
        assert len(locks) == 1
