"""The resume algorithm behind Execution.events(), driven by hand.

The algorithm only asks for I/O (read the live stream, load stored events,
load the run's status, pause), so these tests answer its requests from lists:
every interleaving of a live stream and the durable log that matters (gaps,
trims, a wiped stream, a publish lost after its commit) is spelled out here,
without servers. tests/distributed/test_executions.py covers the same paths
with real Redis, PostgreSQL and workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from lg_core.errors import InvocationError
from lg_core.events import StreamEvent
from lg_core.execution_event_ids import parse_event_id, parse_resume_point
from lg_core.execution_follow import (
    ANNOUNCED_EARLIER,
    _Covers,
    _Emit,
    _Follow,
    _Locate,
    _Pause,
    _ReadLive,
    _Status,
    _Stored,
)


def _seq(event: StreamEvent) -> int:
    """A stored event's number (every durable event in these fakes has one)."""
    assert event.seq is not None
    return event.seq


def durable(seq: int, type: str = "usage", **data) -> StreamEvent:
    return StreamEvent.build(type, **data).with_seq(seq)


def live(type: str = "text_delta", **data) -> StreamEvent:
    return StreamEvent.build(type, **data)


STOP = "run_stop"


@dataclass
class Record:
    event_seq: int
    status: str = "running"
    id: str = "run-1"

    @property
    def finished(self) -> bool:
        return self.status != "running"


@dataclass
class World:
    """A run's durable log and the batches its live stream returns, in order."""

    stored: list[StreamEvent]
    batches: list[list[tuple[str, StreamEvent]] | None] = field(default_factory=list)
    covers: bool = True
    located: str | None = None  # where the stream holds the durable event a bare seq names
    later: list[StreamEvent] = field(default_factory=list)  # committed (ending the run) once the stream runs dry
    commit_after: type | None = None  # ... or as soon as the reader has made a request of this type
    requests: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return not self.later

    def follow(self, after: str | None = None, has_live: bool = True) -> list[StreamEvent]:
        seen, position, announced = parse_resume_point(after)
        plan = _Follow(
            seen,
            position or "0",
            has_live,
            known_position=position is not None,
            announced=[ANNOUNCED_EARLIER] * announced,
        ).run()
        out: list[StreamEvent] = []
        reply = None
        for _ in range(1000):
            try:
                request = plan.send(reply)
            except StopIteration:
                return out
            reply = self.answer(request, out)
        raise AssertionError(f"the reader never ended: {self.requests[-5:]}")

    def answer(self, request, out: list[StreamEvent]):
        reply = self._reply(request, out)
        if self.commit_after is not None and isinstance(request, self.commit_after):
            self._commit_later()
        return reply

    def _reply(self, request, out: list[StreamEvent]):
        self.requests.append(type(request).__name__)
        if isinstance(request, _Emit):
            out.append(request.event)
        elif isinstance(request, _ReadLive):
            if self.batches:
                return self.batches.pop(0)
            self._commit_later()
            return []
        elif isinstance(request, _Covers):
            return self.covers
        elif isinstance(request, _Locate):
            return self.located
        elif isinstance(request, _Stored):
            return [
                e
                for e in self.stored
                if request.after < _seq(e) and (request.until is None or _seq(e) <= request.until)
            ]
        elif isinstance(request, _Status):
            last = max((_seq(e) for e in self.stored), default=0)
            return Record(last, "completed" if self.finished else "running")
        elif isinstance(request, _Pause):
            self._commit_later()
        return None

    def _commit_later(self) -> None:
        self.stored, self.later = self.stored + self.later, []


def kinds(events: list[StreamEvent]) -> list[tuple[str, int | None]]:
    return [(e.type, e.seq) for e in events]


LOG = [durable(1, "invocation_start"), durable(2), durable(3, "message_stop"), durable(4, STOP)]


def test_an_intact_stream_is_read_in_order_with_resumable_ids():
    world = World(LOG, [[("1-0", LOG[0]), ("1-1", live()), ("1-2", LOG[1]), ("1-3", LOG[2]), ("1-4", LOG[3])]])

    events = world.follow()

    assert kinds(events) == [
        ("invocation_start", 1),
        ("text_delta", None),
        ("usage", 2),
        ("message_stop", 3),
        (STOP, 4),
    ]
    assert [e.id for e in events] == ["1-1-0", "1-1-1", "2-1-2", "3-1-3", "4-1-4"]
    assert "_Stored" not in world.requests  # nothing was missing: the store was not read


def test_durable_events_missing_from_the_stream_are_filled_in_from_the_store():
    world = World(LOG, [[("1-0", LOG[0]), ("1-3", LOG[3])]])  # 2 and 3 were trimmed or lost

    events = world.follow()

    assert kinds(events) == [("invocation_start", 1), ("usage", 2), ("message_stop", 3), (STOP, 4)]
    # a client resuming from a filled-in event reads the stream from before the entry that revealed the gap
    assert [e.id for e in events] == ["1-1-0", "2-1-0", "3-1-0", "4-1-3"]


def test_a_commit_whose_publish_was_lost_is_found_when_the_stream_goes_quiet():
    world = World(LOG, [[("1-0", LOG[0])], [], None])  # then silence, then Redis unreachable

    events = world.follow()

    assert kinds(events) == [("invocation_start", 1), ("usage", 2), ("message_stop", 3), (STOP, 4)]


def test_resuming_skips_what_the_client_saw_and_repeats_nothing():
    world = World(LOG, [[("1-2", LOG[1]), ("1-3", LOG[2]), ("1-4", live()), ("1-5", LOG[3])]])

    events = world.follow(after="2-1-2")

    assert kinds(events) == [("message_stop", 3), ("text_delta", None), (STOP, 4)]


def test_after_a_backfill_stale_deltas_in_the_stream_are_dropped_and_current_ones_kept():
    stale, current = live(text="old"), live(text="new")
    # The stream lost the client's position: the reader backfills 2..3 from the store, then
    # reads a tail holding a delta published before seq 3 (stale) and one after it (current).
    world = World(
        LOG[:3],
        [[("9-0", stale), ("9-1", LOG[2]), ("9-2", current)], []],
        covers=False,
        later=[durable(4, "usage"), durable(5, STOP)],
    )

    events = world.follow(after="1-5-0")

    assert kinds(events) == [("usage", 2), ("message_stop", 3), ("text_delta", None), ("usage", 4), (STOP, 5)]
    assert events[2].data["text"] == "new"


def test_a_model_retry_seen_live_is_not_yielded_again_from_the_store():
    retry = StreamEvent.build("model_retry", attempt=2, partial_text=True)
    log = [LOG[0], retry.with_seq(2), durable(3, "message_stop"), durable(4, STOP)]
    world = World(log, [[("1-0", log[0]), ("1-1", retry), ("1-2", log[2]), ("1-3", log[3])]])

    assert kinds(world.follow()) == [("invocation_start", 1), ("model_retry", None), ("message_stop", 3), (STOP, 4)]


def test_a_reader_resuming_after_a_live_model_retry_does_not_yield_it_again():
    """The id of an event read after a live model_retry counts it, so a client reconnecting
    with that id (SSE Last-Event-ID) is not told of a second retry, which would make it drop
    the text streamed since the first."""
    retry = StreamEvent.build("model_retry", attempt=2, partial_text=True)
    log = [LOG[0], retry.with_seq(2), durable(3, "message_stop"), durable(4, STOP)]
    stream = [
        ("1-0", log[0]),
        ("1-1", retry),
        ("1-2", live(text="again")),
        ("1-3", log[1]),
        ("1-4", log[2]),
        ("1-5", log[3]),
    ]
    whole = World(log, [stream]).follow()
    assert [e.id for e in whole] == ["1-1-0", "1-1-1.1", "1-1-2.1", "3-1-4", "4-1-5"]  # stored copy at 1-3 skipped

    for cut in (1, 2):  # reconnecting after the model_retry, or after the delta that followed it
        resumed = World(log, [stream[cut + 1 :]]).follow(after=whole[cut].id)
        assert kinds(resumed) == kinds(whole[cut + 1 :])
    from_store = World(log, covers=False).follow(after="1-0.1")  # position unknown: the log is read
    assert kinds(from_store) == [("message_stop", 3), (STOP, 4)]


def test_without_a_live_stream_the_store_is_polled_until_the_run_ends():
    world = World(LOG[:2], later=LOG[2:])

    assert kinds(world.follow(has_live=False)) == [
        ("invocation_start", 1),
        ("usage", 2),
        ("message_stop", 3),
        (STOP, 4),
    ]
    assert "_Pause" in world.requests


def test_a_finished_run_read_from_its_end_yields_nothing():
    assert World(LOG, covers=False).follow(after="4-0") == []


@pytest.mark.parametrize(
    "bad", ["x", "1-", "-1", "1-2-3-4", "1.5", "1-a", "1-2.", "1-2.x", "1-2.12345", "1-2.1.1", "\u0661", "1-\u0662"]
)
def test_malformed_event_ids_are_refused(bad):
    with pytest.raises(InvocationError, match="event id"):
        parse_event_id(bad)


def test_an_id_ahead_of_the_run_is_refused():
    with pytest.raises(InvocationError, match="ahead of run run-1"):
        World(LOG).follow(after="9-0")


def test_event_id_forms():
    assert parse_event_id(None) == (0, "0")
    assert parse_event_id("") == (0, "0")
    assert parse_event_id("7") == (7, None)  # a bare durable seq: the stream position is unknown
    assert parse_event_id("7-12") == (7, "12")
    assert parse_event_id("7-1712345678901-3") == (7, "1712345678901-3")
    assert parse_resume_point("7-1712345678901-3.2") == (7, "1712345678901-3", 2)
    assert parse_resume_point("7-12") == (7, "12", 0)


def test_a_quiet_reader_checks_the_store_less_and_less_often_and_reads_live_events_at_once():
    world = World(LOG[:1], [[], [], [], [], [], [], [("1-1", live())], []], later=LOG[1:])
    blocks = []

    def note(request, out, original=world.answer):
        if isinstance(request, _ReadLive):
            blocks.append(request.block)
        return original(request, out)

    world.answer = note
    world.follow()

    assert blocks[:8] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 0.5]  # a live event resets the wait


def test_an_id_given_without_a_stream_position_resumes_from_the_log_not_the_stream_start():
    """A reader that backfilled from the store hands out "<seq>-0": resuming from it must not
    replay the stream from its start (deltas older than what the client has)."""
    assert parse_event_id("2-0") == (2, None) and parse_event_id("0-0") == (0, "0")
    old = live(text="old")
    world = World(LOG, [[("1-0", LOG[0]), ("1-1", old), ("1-2", LOG[1]), ("1-3", LOG[2]), ("1-4", LOG[3])]])

    events = world.follow(after="2-0")

    assert kinds(events) == [("message_stop", 3), (STOP, 4)]


def test_a_publish_still_in_flight_when_the_stream_goes_quiet_does_not_reorder_its_deltas():
    delta = live(text="old")
    world = World(
        LOG[:3],
        [[("1-0", LOG[0])], [], [("1-1", delta), ("1-2", LOG[1]), ("1-3", LOG[2]), ("1-4", LOG[3])]],
        later=[LOG[3]],
    )

    events = world.follow()

    assert kinds(events) == [("invocation_start", 1), ("usage", 2), ("message_stop", 3), (STOP, 4)]


def test_event_ids_with_absurdly_many_digits_are_refused():
    with pytest.raises(InvocationError):
        parse_event_id("9" * 5000)


def test_a_model_retry_held_after_a_backfill_is_not_yielded_again_once_its_stored_copy_fills_a_gap():
    """``lg runs retry`` on workers reads from the run_retried marker's seq (no stream position):
    after that backfill the stream's live-only events are held, the live model_retry among them,
    while its stored copy reaches the reader first, filling the gap before the next durable event."""
    retry = StreamEvent.build("model_retry", attempt=2, partial_text=True)
    log = [durable(1, "run_retried"), retry.with_seq(2), durable(3, "message_stop"), durable(4, STOP)]
    world = World(
        log[:1],
        [[("1-0", retry), ("1-1", live()), ("1-2", log[2]), ("1-3", log[3])]],
        covers=False,
        later=log[1:],
        commit_after=_Stored,
    )  # committed right after the backfill

    events = world.follow(after="0")

    assert kinds(events) == [
        ("run_retried", 1),
        ("model_retry", 2),
        ("text_delta", None),
        ("message_stop", 3),
        (STOP, 4),
    ]


def test_a_model_retry_of_an_attempt_that_never_committed_does_not_make_the_next_one_repeat():
    """An attempt killed after publishing its model_retry never stores it; the next attempt's
    stored model_retry must still be recognized as the copy of what the reader yielded."""
    orphan = StreamEvent.build("model_retry", attempt=2, partial_text=True, reason="step re-executed after a crash")
    retry = StreamEvent.build("model_retry", attempt=3, partial_text=True, reason="step re-executed after a crash")
    log = [LOG[0], retry.with_seq(2), durable(3, "message_stop"), durable(4, STOP)]
    stream = [
        ("1-0", log[0]),
        ("1-1", orphan),
        ("1-2", live(text="lost")),  # attempt 2: killed before its commit
        ("1-3", retry),
        ("1-4", live(text="kept")),  # attempt 3
        ("1-5", log[1]),
        ("1-6", log[2]),
        ("1-7", log[3]),  # attempt 3's commit
    ]

    events = World(log, [stream]).follow()

    retries = [e for e in events if e.type == "model_retry"]
    assert len(retries) == 2, kinds(events)  # each attempt's retry once; the stored copy of attempt 3's is not repeated


def test_a_bare_seq_found_in_the_stream_is_followed_live_with_its_deltas():
    """A fork's reader starts "after durable event N" (the events copied before its marker);
    its run may have ended before the reader's first query. Located in the stream, the
    reader still gets the token deltas that followed N, which the store never holds."""
    entries = [("1-1", live(text="Forked")), ("1-2", LOG[1]), ("1-3", LOG[2]), ("1-4", LOG[3])]
    world = World(LOG, [entries], located="1-0")

    events = world.follow("1")

    assert kinds(events) == [("text_delta", None), ("usage", 2), ("message_stop", 3), (STOP, 4)]
    assert "_Stored" not in world.requests  # nothing was missing from the stream


def test_a_bare_seq_the_stream_no_longer_has_is_backfilled_from_the_store():
    world = World(LOG, [], located=None)

    events = world.follow("1")

    assert kinds(events) == [("usage", 2), ("message_stop", 3), (STOP, 4)]  # the deltas went with the stream


def test_the_in_process_log_locates_an_event_or_the_one_after_it():
    from lg_core.engine.background import _RunLog

    log = _RunLog()
    for event in [durable(5, "run_forked"), live(), durable(6), durable(7, STOP)]:
        log.append(event)

    assert [e.seq for _p, e in log.read(log.locate(6), 0)] == [7]
    assert [e.type for _p, e in log.read(log.locate(4), 0)] == ["run_forked", "text_delta", "usage", STOP]
    assert log.locate(9) is None


def test_a_reader_started_before_the_first_publish_gets_the_first_turns_deltas():
    """``start_execution`` then ``events()`` at once, on a fast model: the stream does not exist
    yet when the reader looks, and the first turn streams and commits before its next query.
    Backfilling from the store first would yield the turn's durable events and then drop its
    token deltas from the stream as older: the text would never be shown."""
    log = [durable(1, "invocation_start"), durable(2, "message_stop"), durable(3, STOP)]
    stream = [
        ("1-0", live(text="Refunds")),
        ("1-1", live(text=" are")),
        ("1-2", log[0]),
        ("1-3", log[1]),
        ("1-4", log[2]),
    ]
    world = World([], [stream], covers=False, later=log, commit_after=_Covers)  # published right after the look

    events = world.follow()

    assert kinds(events) == [
        ("text_delta", None),
        ("text_delta", None),
        ("invocation_start", 1),
        ("message_stop", 2),
        (STOP, 3),
    ]
    assert [e.data["text"] for e in events[:2]] == ["Refunds", " are"]


def test_a_whole_run_reader_of_a_stream_missing_its_start_fills_it_from_the_store_and_keeps_the_deltas():
    """The stream was trimmed (or recreated after Redis lost it): what it no longer holds comes
    from the store, before the deltas the stream still has, which precede its first durable event."""
    stream = [("9-0", live(text="tail")), ("9-1", LOG[2]), ("9-2", LOG[3])]
    world = World(LOG[:3], [stream], covers=False, later=LOG[3:])  # the run is still going

    events = world.follow()

    assert kinds(events) == [
        ("invocation_start", 1),
        ("usage", 2),
        ("text_delta", None),
        ("message_stop", 3),
        (STOP, 4),
    ]


def test_a_whole_run_reader_whose_stream_is_gone_catches_up_from_the_store_once_it_stays_quiet():
    world = World(LOG[:2], [[]], covers=False, later=LOG[2:])  # Redis lost the stream; nothing new is published

    events = world.follow()

    assert kinds(events) == [("invocation_start", 1), ("usage", 2), ("message_stop", 3), (STOP, 4)]


def test_a_whole_run_reader_of_a_finished_run_without_a_stream_reads_the_store_at_once():
    world = World(LOG, covers=False)

    assert kinds(world.follow()) == [("invocation_start", 1), ("usage", 2), ("message_stop", 3), (STOP, 4)]
    assert "_ReadLive" not in world.requests
