"""The follow algorithm of a run's events, written once as requests to a driver.

A plan (:class:`_Follow`, :func:`_wait_plan`) is a generator that *asks* for I/O
(read the live stream, load stored events, pause...) and never performs it; the
readers in :mod:`lg_core.execution_readers` drive it with blocking calls or with
awaitables, so the sync and async forms cannot drift apart. Resuming from an event
id replays, from the run store, any durable event the live stream no longer has
(trimmed, or lost with Redis), and skips any the client already saw; token deltas
live only in the live stream.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

from lg_core.errors import DeadlineExceededError
from lg_core.events import PUBLISHED_AT_ONCE, StreamEvent
from lg_core.execution_event_ids import check_event_id

if TYPE_CHECKING:
    from lg_core.store.records import RunRecord

POLL_SECONDS = 0.5  # how long a quiet reader waits before it checks the store ...
MAX_QUIET_SECONDS = 5.0  # ... doubling while it stays quiet, up to this (live events still arrive at once)


@dataclass(frozen=True, slots=True)
class _Covers:
    position: str  # -> bool


@dataclass(frozen=True, slots=True)
class _Locate:
    seq: int  # -> position | None


@dataclass(frozen=True, slots=True)
class _ReadLive:
    position: str
    block: float  # -> list[(position, event)] | None


@dataclass(frozen=True, slots=True)
class _Stored:
    after: int
    until: int | None = None  # -> list[StreamEvent]


@dataclass(frozen=True, slots=True)
class _Status:
    pass  # -> RunRecord


@dataclass(frozen=True, slots=True)
class _End:
    pass  # -> position of the live stream's newest entry now | None


@dataclass(frozen=True, slots=True)
class _Pause:
    seconds: float  # -> None


@dataclass(frozen=True, slots=True)
class _Emit:
    event: StreamEvent  # -> None


Request = _Covers | _Locate | _End | _ReadLive | _Stored | _Status | _Pause | _Emit
Plan = Generator[Request, Any, Any]


@dataclass
class _Follow:
    """One reader's place in a run's events, and the algorithm that advances it.

    ``seen`` is the highest durable seq yielded, ``position`` the live-stream
    position. While the stream stays quiet the reader checks the store after
    ``poll`` seconds, then after twice as long, and so on up to
    MAX_QUIET_SECONDS: a lost publish is found within seconds, and an idle
    reader costs one store query every few seconds, not several a second.
    ``behind`` is set after a backfill from the store: the live tail
    may then still hold live-only events older than what was yielded, so they
    are held in ``held`` until the stream proves them current (a durable event
    newer than ``seen`` follows them, or the stream goes quiet) or stale (a
    durable event already yielded follows them). ``announced`` holds events
    published at once without a seq (``model_retry``) so their stored copy is
    not yielded a second time; a reader resuming from an id starts with as many
    placeholders (``ANNOUNCED_EARLIER``) as the id counts, since the events
    themselves are not in it.
    """

    seen: int
    position: str
    has_live: bool
    known_position: bool = True
    poll: float = POLL_SECONDS
    behind: bool = False
    held: list[tuple[str, StreamEvent]] = field(default_factory=list)
    announced: list[StreamEvent | None] = field(default_factory=list)

    def run(self) -> Plan:
        record = yield _Status()
        check_event_id(str(self.seen), record)
        if self.has_live and not self.known_position and self.seen > 0:
            # "After durable event N": where N sits in the stream says which live-only events
            # (token deltas) follow it. Without it the reader backfills from the store, and
            # a run that ended meanwhile (a fork on fast workers) would show no text at all.
            located = yield _Locate(self.seen)
            if located is not None:
                self.position, self.known_position = located, True
        if not (self.has_live and self.known_position and (yield _Covers(self.position))):
            if self._from_the_start() and not record.finished:
                # No stream yet (nothing published), or one missing its start: read it from its
                # first entry anyway, holding live-only events until a durable one proves them
                # current. A backfill first would race the run's first commit: its events
                # yielded from the store, the token deltas before them in the stream would be
                # dropped as older, and a fast turn's text never shown. A gap before the
                # stream's first durable event is filled from the store; a stream that stays
                # quiet is caught up from the store (_quiet).
                self.behind = True
            else:
                if (yield from self._backfill()) or record.finished:
                    return
                self.behind = self.has_live
        quiet = 0
        while True:
            # Without a live stream the store is the only source: poll it steadily.
            wait = min(self.poll * 2**quiet, MAX_QUIET_SECONDS) if self.has_live else self.poll
            entries = (yield _ReadLive(self.position, wait)) if self.has_live else None
            if entries:
                quiet = 0
                if (yield from self._live(entries)):
                    return
                continue
            if (yield from self._quiet()):
                return
            if entries is None:
                yield _Pause(wait)
            quiet = min(quiet + 1, 8)

    def _from_the_start(self) -> bool:
        """A reader of the whole run (no event id given) with a live stream to read."""
        return self.has_live and self.known_position and self.seen == 0 and self.position == "0"

    def _live(self, entries: list[tuple[str, StreamEvent]]) -> Generator[Request, Any, bool]:
        for position, event in entries:
            before, self.position = self.position, position
            if event.seq is None:
                if self.behind:
                    self.held.append((position, event))
                    continue
                if event.type in PUBLISHED_AT_ONCE:
                    self.announced.append(event)
                yield self._emit(event, position)
                continue
            if event.seq <= self.seen:
                self.held.clear()  # live-only events published before one already yielded
                continue
            if event.seq > self.seen + 1:
                missing = yield _Stored(self.seen, event.seq - 1)
                for stored in missing:
                    yield from self._durable(stored, before)
            yield from self._release()
            yield from self._durable(event, position)
            if event.terminal and (yield from self._ends_with(event)):
                return True
        return False

    def _quiet(self) -> Generator[Request, Any, bool]:
        """The live stream has nothing new: catch up from the store; True when the run ended."""
        record: RunRecord = yield _Status()
        if record.event_seq > self.seen:
            self.held.clear()  # the stream lost durable events; what it held is of unknown age
            if (yield from self._backfill()):
                return True
            # As after any backfill: live-only events still on their way may be older.
            self.behind = self.has_live
        else:
            yield from self._release()
        return record.finished

    def _backfill(self) -> Generator[Request, Any, bool]:
        for stored in (yield _Stored(self.seen)):
            yield from self._durable(stored, self.position)
            if stored.terminal and (yield from self._ends_with(stored)):
                return True
        return False

    def _ends_with(self, terminal: StreamEvent) -> Generator[Request, Any, bool]:
        """Whether ``terminal`` is the run's last event: not when a retry reopened the run
        after it (``run_retried`` follows), as a retried run's log, or a fork's copy of
        it, holds an earlier ending."""
        record: RunRecord = yield _Status()
        return record.event_seq <= (terminal.seq or 0)

    def _release(self) -> Generator[Request, Any, None]:
        held, self.held, self.behind = self.held, [], False
        for position, event in held:
            yield self._emit(event, position)

    def _durable(self, event: StreamEvent, position: str) -> Generator[Request, Any, None]:
        previous, self.seen = self.seen, max(self.seen, event.seq or 0)
        if self.announced and self._take_announced(event):
            return  # already yielded when it was published at once
        if event.seq is not None and event.seq <= previous:
            return
        self._drop_held_copy(event)
        yield self._emit(event, position)

    def _take_announced(self, stored: StreamEvent) -> bool:
        """Is ``stored`` the copy of an event yielded when it was published at once? Forgets it.

        Copies come in the order their events were announced, so the ones announced
        before it never get one: their attempt never committed (its worker was killed,
        or another took the step over), and a later attempt announced its own. They are
        forgotten too, or each later copy would be compared with them and yielded again.
        """
        for index, announced in enumerate(self.announced):
            if announced is not ANNOUNCED_EARLIER and _is_copy_of(stored, announced):
                del self.announced[: index + 1]
                return True
        if self.announced[0] is ANNOUNCED_EARLIER and _is_copy_of(stored, ANNOUNCED_EARLIER):
            self.announced.pop(0)
            return True
        return False

    def _drop_held_copy(self, stored: StreamEvent) -> None:
        """Forget the live copy of a published-at-once event (``model_retry``) held after a backfill
        when its stored copy is yielded first (it filled a gap): released later, it would repeat."""
        if stored.type not in PUBLISHED_AT_ONCE:
            return
        for index, (_position, held) in enumerate(self.held):
            if held.type == stored.type and dict(held.data) == dict(stored.data):
                del self.held[index]
                return

    def _emit(self, event: StreamEvent, position: str) -> _Emit:
        """The event with its resume id: the durable seq seen so far, the stream position it came
        from, and how many events published at once still await their stored copy."""
        pending = f".{len(self.announced)}" if self.announced else ""
        return _Emit(replace(event, id=f"{self.seen}-{position}{pending}"))


ANNOUNCED_EARLIER: Final = None  # an event published at once that an earlier reader yielded (resume ids)


def _is_copy_of(stored: StreamEvent, announced: StreamEvent | None) -> bool:
    """Is ``stored`` the stored copy of ``announced``, which was yielded when published at once?"""
    if announced is ANNOUNCED_EARLIER:
        return stored.type in PUBLISHED_AT_ONCE
    return stored.type == announced.type and dict(stored.data) == dict(announced.data)


STORE_POLL_FIRST = 0.01  # without a live stream, the store is polled after this ...
STORE_POLL_MAX = 0.25  # ... growing to this
EARLY_SECONDS = 0.01  # a read back this much before its time is on time (Redis counts whole ms)


def _wait_plan(run_id: str, timeout: float | None, has_live: bool) -> Plan:
    """Wait for the run to finish: on its live stream when it has one, else by polling the store.

    The store is the authority: it is read first (a run that already finished returns at
    once), after every terminal event on the stream (a retry may have reopened the run), and
    whenever the stream stays quiet, after POLL_SECONDS doubling to MAX_QUIET_SECONDS, so a
    publish that was lost delays the return by seconds at most, never forever. The stream is
    read from its newest entry, taken before the store's first answer: a run that finishes
    after that answer publishes its terminal event after that entry. An unreachable stream
    falls back to polling the store, backing off to STORE_POLL_MAX.
    """
    limit = None if timeout is None else time.monotonic() + timeout
    position: str | None = (yield _End()) if has_live else None
    delay, quiet = STORE_POLL_FIRST, POLL_SECONDS
    while True:
        record = yield _Status()
        if record.finished:
            return record
        left = _time_left(run_id, record, timeout, limit)
        if position is None:
            yield _Pause(min(delay, left))
            delay = min(delay * 1.5, STORE_POLL_MAX)
            continue
        position, reached = yield from _until_terminal(position, min(quiet, left))
        if reached is None:  # the stream cannot be waited on now: poll the store meanwhile
            yield _Pause(min(delay, left))
            delay = min(delay * 1.5, STORE_POLL_MAX)
        elif not reached:
            quiet = min(quiet * 2, MAX_QUIET_SECONDS)


def _until_terminal(position: str, seconds: float) -> Generator[Request, Any, tuple[str, bool | None]]:
    """Read the live stream from ``position`` for up to ``seconds``: until a terminal event (True),
    the time passes without one (False), or the stream cannot be waited on (None: unreachable,
    or a read that came back empty before its time, as a closed log does). Returns the new
    position too."""
    until = time.monotonic() + seconds
    while (block := until - time.monotonic()) > 0:
        entries = yield _ReadLive(position, block)
        if not entries:
            return position, None if entries is None or time.monotonic() < until - EARLY_SECONDS else False
        position = entries[-1][0]
        if any(event.terminal for _position, event in entries):
            return position, True
    return position, False


def _time_left(run_id: str, record: RunRecord, timeout: float | None, limit: float | None) -> float:
    """Seconds the wait may still take (MAX_QUIET_SECONDS, the longest single read, without a
    limit); DeadlineExceededError once none are left."""
    if limit is None:
        return MAX_QUIET_SECONDS
    left = limit - time.monotonic()
    if left <= 0:
        raise DeadlineExceededError(f"run {run_id} is still {record.status} after {timeout} s; it keeps going")
    return left


__all__ = ["ANNOUNCED_EARLIER", "MAX_QUIET_SECONDS", "POLL_SECONDS", "Plan", "Request"]
