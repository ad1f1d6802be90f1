"""Execution.wait's plan: it waits on the run's live stream for the terminal event, with the store
as the authority for the final state and its fallback when the stream is lost or absent."""

from __future__ import annotations

from types import MappingProxyType, SimpleNamespace

import pytest

from lg_core.errors import DeadlineExceededError
from lg_core.events import StreamEvent
from lg_core.execution_follow import _Pause, _ReadLive, _Status, _wait_plan
from lg_core.execution_readers import drive


def record(finished: bool) -> SimpleNamespace:
    return SimpleNamespace(finished=finished, status="completed" if finished else "running", event_seq=0)


def event(kind: str, seq: int | None = None) -> StreamEvent:
    return StreamEvent(kind, MappingProxyType({}), seq)


class Store:
    """Answers status reads from a list of finished flags (the last one repeats), counting them."""

    def __init__(self, *finished: bool) -> None:
        self.answers = list(finished)
        self.reads = 0

    def __call__(self, request):
        assert isinstance(request, _Status)
        self.reads += 1
        return record(self.answers.pop(0) if len(self.answers) > 1 else self.answers[0])


class Stream:
    """A live source that answers reads from a script of replies and records the positions read."""

    def __init__(self, *replies, end: str | None = "7") -> None:
        self.replies = list(replies)
        self.positions: list[str] = []
        self._end = end

    def end(self):
        return self._end

    def read(self, position, block):
        self.positions.append(position)
        return self.replies.pop(0) if self.replies else []

    def covers(self, position):
        return True


def run_plan(store, live, timeout=None):
    return list(drive(_wait_plan("r1", timeout, live is not None), store, "r1", live))


def test_a_run_that_already_finished_returns_after_one_store_read_without_reading_the_stream():
    store, live = Store(True), Stream()
    run_plan(store, live)
    assert store.reads == 1 and live.positions == []


def test_the_wait_reads_the_stream_from_its_newest_entry_and_ends_at_the_terminal_event():
    store = Store(False, True)
    live = Stream([("8", event("text_delta")), ("9", event("tool_call_start", 3))], [("10", event("run_stop", 4))])
    run_plan(store, live)
    assert live.positions == ["7", "9"]  # after the newest entry, then on from what it read
    assert store.reads == 2  # before the stream, and once the terminal event came: no polling between


def test_a_terminal_event_the_store_does_not_confirm_keeps_the_wait_going():
    """A retry can reopen a run after its ending: the store, not the event, says it finished."""
    store = Store(False, False, True)
    live = Stream([("8", event("run_stop", 4))], [("9", event("run_retried", 5))], [("10", event("run_stop", 9))])
    run_plan(store, live)
    assert store.reads == 3 and live.positions == ["7", "8", "9"]


def test_an_unreachable_stream_falls_back_to_polling_the_store_with_pauses():
    store = Store(False, False, False, True)
    plan = _wait_plan("r1", None, True)
    requests = [next(plan)]
    replies = {_Status: lambda: store(_Status()), _ReadLive: lambda: None, _Pause: lambda: None}
    request = plan.send("7")  # the stream's end
    try:
        while True:
            requests.append(request)
            request = plan.send(replies[type(request)]())
    except StopIteration:
        pass
    pauses = [r for r in requests if isinstance(r, _Pause)]
    assert len(pauses) == 3 and all(p.seconds > 0 for p in pauses)  # never a busy loop
    assert store.reads == 4


def test_a_stream_that_answers_at_once_with_nothing_is_not_read_in_a_busy_loop():
    """A finished in-process log returns [] without waiting: each such read is followed by a pause."""
    store = Store(False, False, True)
    plan = _wait_plan("r1", None, True)
    next(plan)
    request = plan.send("3")
    kinds = []
    try:
        while True:
            kinds.append(type(request))
            reply = store(request) if isinstance(request, _Status) else [] if isinstance(request, _ReadLive) else None
            request = plan.send(reply)
    except StopIteration:
        pass
    reads = [i for i, kind in enumerate(kinds) if kind is _ReadLive]
    assert reads and all(kinds[i + 1] is _Pause for i in reads)


def test_without_a_live_stream_the_store_is_polled():
    store = Store(False, False, True)
    run_plan(store, None)
    assert store.reads == 3


def test_the_timeout_raises_deadline_exceeded_and_says_the_run_keeps_going():
    store = Store(False)
    with pytest.raises(DeadlineExceededError, match="run r1 is still running after 0.2 s; it keeps going"):
        run_plan(store, Stream(end="0"), timeout=0.2)
