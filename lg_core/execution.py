"""Execution: a handle on a run that executes in the background.

``Agent.start_execution(...)`` persists the run and returns at once; the run
executes on a thread of this process (embedded mode) or on Celery workers
(when ``broker_url`` is configured and ``lg_workers`` is installed). Either way
the handle works from any process: ``lg_core.get_execution(run_id)``.

Event ids (for Server-Sent Events' ``Last-Event-ID``) are ``"<seq>-<position>"``:
``seq`` is the highest durable event sequence number the reader has yielded,
``position`` its place in the live stream (a bare ``"<seq>"`` means "after
durable event ``seq``", position unknown), with a ``".<n>"`` suffix while
``n`` events published at once (``model_retry``) await their stored copy.
Resuming from an id replays, from
the run store, any durable event the live stream no longer has (trimmed, or
lost with Redis), and skips any the client already saw; so a reconnecting
client misses no durable event and sees none twice. Token deltas live only in
the live stream.

The resume algorithm is written once, as a generator that *asks* for I/O
(:class:`_Follow`: read the live stream, load stored events, pause...) and
never performs it. ``for event in execution.events()`` drives it with blocking
calls; ``async for event in execution.events()`` drives it with awaitables
(``redis.asyncio`` for the live stream, the short store queries on worker
threads), so the sync and async forms cannot drift apart (there are no two
hand-maintained pipelines). ``wait`` is a plan of the same kind. Every other
blocking method has an ``_async`` twin for web apps (``examples/web_app.py``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from lg_core.cancellation import CancellationToken
from lg_core.engine.codec import decode_event_data, encode_event_data
from lg_core.errors import (
    AgentInterjectionError,
    DeadlineExceededError,
    InvocationError,
)
from lg_core.events import PUBLISHED_AT_ONCE, StreamEvent, checked_consumer
from lg_core.execution_backend import ExecutionBackend, LiveSource
from lg_core.interjections import InterjectionResult, reply_wait, wait_timeout
from lg_core.store import RunRecord
from lg_core.store.outage_waits import aread_through_outage, read_through_outage

if TYPE_CHECKING:
    from lg_core.run import Run
    from lg_core.runtime import Runtime

log = logging.getLogger(__name__)

STATES = ("pending", "running", "finished")
POLL_SECONDS = 0.5  # how long a quiet reader waits before it checks the store ...
MAX_QUIET_SECONDS = 5.0  # ... doubling while it stays quiet, up to this (live events still arrive at once)
# "<seq>-<position>[.<announced>]"; bounded, since int() of 5,000 digits raises.
# ASCII digits only: \d also matches other scripts' digits ("١" read as 1).
_EVENT_ID = re.compile(r"^(\d{1,18})(?:-(\d{1,20}(?:-\d{1,20})?)(?:\.(\d{1,4}))?)?$", re.ASCII)
_INTERJECT_OPTIONS = frozenset({"metadata", "interjection_id"})


def parse_event_id(value: str | None) -> tuple[int, str | None]:
    """``(seq, position)`` of an event id; position None when the id names only a seq."""
    seq, position, _announced = parse_resume_point(value)
    return seq, position


def parse_resume_point(value: str | None) -> tuple[int, str | None, int]:
    """``(seq, position, announced)`` of an event id.

    ``announced`` counts the events published at once (``model_retry``) that the
    reader had yielded from the live stream before their stored copy: a reader
    resuming from the id skips that many stored copies instead of repeating them
    (a client would take a repeated ``model_retry`` as a second retry and drop the
    text streamed since the first).
    """
    if value is None or value == "":
        return 0, "0", 0
    match = _EVENT_ID.fullmatch(str(value).strip())
    if match is None:
        raise InvocationError(
            f"event id {value!r} is not one this run produced: expected '<seq>-<position>' as given in "
            "event.id (or a bare durable sequence number)"
        )
    seq, position, announced = int(match.group(1)), match.group(2), int(match.group(3) or 0)
    if seq > 0 and position == "0":
        # An id given while the reader had no stream position (it read the store): no
        # real position is "0", so this id says where to resume in the log only.
        position = None
    return seq, position, announced


def check_event_id(value: str | None, record: RunRecord) -> tuple[int, str | None]:
    """:func:`parse_event_id`, also refusing an id ahead of the run's durable log."""
    seq, position = parse_event_id(value)
    if seq > record.event_seq:
        raise InvocationError(
            f"event id {value!r} is ahead of run {record.id}, which has {record.event_seq} durable events; "
            "pass an id this run's events carried"
        )
    return seq, position


def event_json(event: StreamEvent) -> dict[str, Any]:
    """The event's data as JSON-safe values, e.g. for an SSE ``data:`` line.

    Events can carry inputs, tool arguments and results: check that the destination
    may see the whole run (the spec's safety note). A durable event is given as stored,
    so an error is in its caller-safe form (lg_core.engine.caller_errors) here too,
    never the live exception's own text.
    """
    if event.stored is not None:
        return dict(event.stored)
    return encode_event_data(event.data)


def state_of(record: RunRecord) -> str:
    """``pending`` (waiting for its session), ``running`` or ``finished``."""
    if record.finished:
        return "finished"
    return "pending" if record.status == "pending" else "running"


# -- the follow algorithm, as requests to a driver ---------------------------------------------


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
class _Pause:
    seconds: float  # -> None


@dataclass(frozen=True, slots=True)
class _Emit:
    event: StreamEvent  # -> None


Request = _Covers | _Locate | _ReadLive | _Stored | _Status | _Pause | _Emit
Plan = Generator[Request, Any, Any]


@dataclass
class _Follow:
    """One reader's place in a run's events, and the algorithm that advances it.

    ``seen`` is the highest durable seq yielded, ``position`` the live-stream
    position. While the stream stays quiet the reader checks the store after
    ``poll`` seconds, then after twice as long, and so on up to
    MAX_QUIET_SECONDS: a lost publish is found within seconds, and an idle
    reader costs one store query every few seconds, not several a second. ``behind`` is set after a backfill from the store: the live tail
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
        record = yield _Status()
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
        record = yield _Status()
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


def _wait_plan(run_id: str, timeout: float | None) -> Plan:
    """Poll the store until the run finishes, backing off to a quarter second."""
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.01
    while True:
        record = yield _Status()
        if record.finished:
            return record
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise DeadlineExceededError(f"run {run_id} is still {record.status} after {timeout} s; it keeps going")
        yield _Pause(delay if remaining is None else min(delay, remaining))
        delay = min(delay * 1.5, 0.25)


# -- the handle ---------------------------------------------------------------------------------


class Execution:
    """A background run: stream its events, wait, cancel, interject, from any process.

    Each blocking method has an ``_async`` twin that never blocks the event loop;
    ``execution.events()`` is both iterable and async-iterable.
    """

    def __init__(self, run_id: str, runtime: Runtime, backend: ExecutionBackend, run: Run | None = None) -> None:
        self.run_id = run_id
        self.runtime = runtime
        self.backend = backend
        self._run = run  # the Run object, when this process started the execution
        self._closed = False

    def __repr__(self) -> str:
        return f"<Execution {self.run_id}>"

    @classmethod
    def start(cls, run: Run, on_event: Callable[[StreamEvent], None] | None = None) -> Execution:
        """Start the dormant ``run`` at once and return its supervising Execution.

        ``on_event`` (the spec's event-consumer block) receives each event on the
        thread executing the run, so keep it quick. If the work cannot start, the
        run is closed before the error is raised. A run that already executed
        raises Error.
        """
        if on_event is not None and run._phase == "dormant":  # never redirect a running run's events
            try:
                checked_consumer(on_event, InvocationError)
            except InvocationError:
                run.close()  # it cannot start: what its hooks registered closes, as for any start failure
                raise
            run._on_event = on_event
        return run.runtime.start_execution(run)

    # -- state -----------------------------------------------------------------------

    def record(self) -> RunRecord:
        """The run as stored now (status, outcome, response, error, event count)."""
        return self.runtime.store.load_run(self.run_id)

    async def record_async(self) -> RunRecord:
        return await asyncio.to_thread(self.record)

    @property
    def state(self) -> str:
        """``pending`` (waiting for its session), ``running`` or ``finished``.

        A run whose outcome is stored but which this process is still closing
        (its registered resources) is still ``running``: the Execution is not done.
        """
        state = state_of(self.record())
        return "running" if state == "finished" and self.backend.executes_here(self.run_id) else state

    @property
    def finished(self) -> bool:
        """True once the run has finished and this process has closed its resources."""
        return self.state == "finished"

    @property
    def active(self) -> bool:
        """True while the run executes or this process still closes it."""
        return not self.finished

    @property
    def run(self) -> Run | None:
        """The supervised Run.

        The Run object this process started (``start_execution``), live while it
        executes and holding the outcome once it has finished; for a handle from
        ``get_execution``, the stored run once it has finished, else None.
        """
        live = self._run
        if live is not None and (live.outcome is not None or self.backend.executes_here(self.run_id)):
            return live  # the store may say finished a moment before the live Run holds its outcome
        if self.record().finished:
            return self.runtime.get_run(self.run_id)
        return live

    @property
    def error(self) -> BaseException | None:
        """An exception an ``on_event`` consumer raised (the run was then cancelled), or the
        first failure closing the run's registered resources in this process; else None."""
        if self._run is None:
            return None
        return self._run._delivery_error or self._run.cleanup_error

    # -- waiting ---------------------------------------------------------------------

    def wait(self, timeout: float | None = None, *, deadline: datetime | None = None) -> Run:
        """Block until the run finishes and return it (the same kind of Run ``ask`` returns).

        ``deadline`` (an aware datetime) is the spec's absolute form of ``timeout``.
        Raises DeadlineExceededError when the time passes first; the run keeps going.
        An exception raised by the ``on_event`` consumer is re-raised here.
        """
        timeout = wait_timeout(timeout, deadline)
        limit = None if timeout is None else time.monotonic() + timeout
        if not self.backend.wait_local(self.run_id, timeout):
            for _event in self._drive(_wait_plan(self.run_id, timeout), limit=limit):
                pass
        return self._finished_run()

    async def wait_async(self, timeout: float | None = None, *, deadline: datetime | None = None) -> Run:
        """:meth:`wait` for async code.

        It polls the store until the run has finished and only then joins a thread
        of this process that executes or follows it (closing its resources is all
        that is left): joining from the start would hold one of the loop's few
        executor threads for the whole run, and keep holding it after the awaiting
        task was cancelled.
        """
        timeout = wait_timeout(timeout, deadline)
        limit = None if timeout is None else time.monotonic() + timeout
        await self._adrive(_wait_plan(self.run_id, timeout), limit)
        left = None if limit is None else max(0.0, limit - time.monotonic())
        await asyncio.to_thread(self.backend.wait_local, self.run_id, left)
        return await asyncio.to_thread(self._finished_run)

    def _finished_run(self) -> Run:
        if self.error is not None:
            raise self.error
        live = self._run
        if live is not None and live.outcome is not None:
            return live  # the supervised Run itself, as ask() would have returned it
        return self.runtime.get_run(self.run_id)

    # -- control ---------------------------------------------------------------------

    def cancel(self) -> Execution:
        """Request cooperative cancellation (seen by whichever process runs the run's next check)."""
        self.runtime.cancel(self.run_id)
        return self

    async def cancel_async(self) -> Execution:
        await asyncio.to_thread(self.runtime.cancel, self.run_id)
        return self

    def close(self, timeout: float | None = None, *, deadline: datetime | None = None) -> Run | None:
        """Refuse new interjections, cancel, and wait for the run to stop; idempotent.

        ``timeout`` and ``deadline`` mean what they mean for :meth:`wait`.
        """
        self._closed = True
        if not self.record().finished:
            self.cancel()
        # Even a finished run may still be closing its resources in this process: wait for that too.
        return self.wait(timeout, deadline=deadline)

    async def close_async(self, timeout: float | None = None, *, deadline: datetime | None = None) -> Run | None:
        self._closed = True
        if not (await self.record_async()).finished:
            await self.cancel_async()
        return await self.wait_async(timeout, deadline=deadline)

    def interject(self, message: Any, **options: Any) -> int:
        """Add a user message the run reads at its next model turn; returns its sequence number.

        ``message`` is a string, a Message or a dict, or the spec's
        ``{"message": ..., "metadata": {...}}`` form. ``interjection_id`` (1-128 of
        letters, digits and ``._:@-``) makes it idempotent: the same id again returns
        the first call's number. Raises AgentInterjectionError once the run has
        finished (or this handle was closed), unless the id was already accepted.
        :meth:`reply` waits for the model's answer to it.
        """
        message, options = _interjection(message, options)
        if self._closed and options.get("interjection_id") is None:
            # With an id the store answers: the first call's number when the id was
            # accepted, else the refusal (close() requested cancellation).
            raise AgentInterjectionError(f"execution {self.run_id} was closed; it accepts no more interjections")
        return self.runtime.interject(self.run_id, message, **options)

    async def interject_async(self, message: Any, **options: Any) -> int:
        return await asyncio.to_thread(self.interject, message, **options)

    def reply(self, number: int, timeout: float | None = None, *, deadline: datetime | None = None, cancellation_token: CancellationToken | None = None) -> InterjectionResult:  # fmt: skip
        """Wait for the model's reply to interjection ``number`` (what :meth:`interject` returned).

        Returns as soon as the model turn that read it has committed; tool calls
        the reply asked for run after that. ``timeout`` / ``deadline`` /
        ``cancellation_token`` end the wait (DeadlineExceededError /
        CancelledError), never the run. Raises AgentInterjectionError when the run
        ended without a turn reading it, RunNotFoundError for an unknown number.
        """
        return reply_wait(self.runtime.store, self.run_id, number, timeout, deadline, cancellation_token).block()

    async def reply_async(self, number: int, timeout: float | None = None, *, deadline: datetime | None = None, cancellation_token: CancellationToken | None = None) -> InterjectionResult:  # fmt: skip
        wait = reply_wait(self.runtime.store, self.run_id, number, timeout, deadline, cancellation_token)
        return await wait.until_answered()

    # -- events -------------------------------------------------------------------------

    def events(self, after: str | None = None, *, poll_interval: float = POLL_SECONDS) -> EventStream:
        """Every event after ``after`` (an event id) to the terminal event; each has ``.id``.

        Iterate it (``for``) or async-iterate it (``async for``). A malformed id raises
        InvocationError here; an id ahead of the run raises it on the first read.
        """
        seen, position, announced = parse_resume_point(after)
        if not isinstance(poll_interval, (int, float)) or isinstance(poll_interval, bool) or poll_interval <= 0:
            raise InvocationError(f"poll_interval must be a positive number of seconds, got {poll_interval!r}")
        return EventStream(self, seen, position, float(poll_interval), announced)

    def aevents(self, after: str | None = None) -> AsyncIterator[StreamEvent]:
        """:meth:`events` for ``async for``: reads Redis with redis.asyncio, never blocking the loop."""
        return self.events(after).__aiter__()

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self.aevents()

    def __iter__(self) -> Iterator[StreamEvent]:
        return iter(self.events())

    # -- drivers: perform what a plan asks, blocking or awaiting ---------------------------------

    def _stored(self, after: int, until: int | None = None) -> list[StreamEvent]:
        records = self.runtime.store.load_events(self.run_id, after)
        return [
            StreamEvent(r.type, MappingProxyType(decode_event_data(r.data)), r.seq)
            for r in records
            if until is None or r.seq <= until
        ]

    def _read_store(self, request: _Stored | _Status) -> Any:
        return self._stored(request.after, request.until) if isinstance(request, _Stored) else self.record()

    def _drive(self, plan: Plan, live: LiveSource | None = None, *, limit: float | None = None) -> Iterator[StreamEvent]:
        """Run ``plan`` with blocking I/O, yielding what it emits; returns the plan's value.

        A store read waits out an outage of the database, up to ``limit`` (monotonic) if given.
        """
        reply: Any = None
        while True:
            try:
                request = plan.send(reply)
            except StopIteration as stop:
                return stop.value
            reply = None
            if isinstance(request, _Emit):
                yield request.event
            elif isinstance(request, _ReadLive):
                reply = live.read(request.position, request.block) if live is not None else None
            elif isinstance(request, _Covers):
                reply = live is not None and live.covers(request.position)
            elif isinstance(request, _Locate):
                reply = _locate(live, request.seq)
            elif isinstance(request, (_Stored, _Status)):
                reply = read_through_outage(partial(self._read_store, request), self.run_id, limit)
            else:
                time.sleep(request.seconds)

    async def _adrive_events(self, plan: Plan, live: Any = None, limit: float | None = None) -> AsyncIterator[StreamEvent]:
        """Run ``plan`` with awaitables: the live source's async reads, store queries on threads
        (waiting out a database outage, up to ``limit``). The source's connection is closed, on
        the loop that opened it, however the iteration ends."""
        reply: Any = None
        try:
            while True:
                try:
                    request = plan.send(reply)
                except StopIteration:
                    return
                reply = None
                if isinstance(request, _Emit):
                    yield request.event
                elif isinstance(request, _ReadLive):
                    reply = await _live_call(live, "read", request.position, request.block)
                elif isinstance(request, _Covers):
                    reply = live is not None and await _live_call(live, "covers", request.position)
                elif isinstance(request, _Locate):
                    reply = await asyncio.to_thread(_locate, live, request.seq)
                elif isinstance(request, (_Stored, _Status)):
                    reply = await aread_through_outage(partial(self._read_store, request), self.run_id, limit)
                else:
                    await asyncio.sleep(request.seconds)
        finally:
            closing = getattr(live, "aclose", None)
            if closing is not None:
                await closing()

    async def _adrive(self, plan: Plan, limit: float | None = None) -> None:
        async for _event in self._adrive_events(plan, limit=limit):
            pass


class EventStream:
    """The events of one run from a given id: ``for`` or ``async for`` over it, once per loop."""

    def __init__(self, execution: Execution, seen: int, position: str | None, poll: float, announced: int = 0) -> None:
        self.execution = execution
        self._seen = seen
        self._position = position
        self._poll = poll
        self._announced = announced

    def _plan(self, live: LiveSource | None) -> Plan:
        follow = _Follow(
            seen=self._seen,
            position=self._position or "0",
            has_live=live is not None,
            known_position=self._position is not None,
            poll=self._poll,
            announced=[ANNOUNCED_EARLIER] * self._announced,
        )
        return follow.run()

    def __iter__(self) -> Iterator[StreamEvent]:
        live = self.execution.backend.live_source(self.execution.run_id)
        return self.execution._drive(self._plan(live), live)

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        live = self.execution.backend.live_source(self.execution.run_id)
        return self.execution._adrive_events(self._plan(live), live)


def _locate(live: Any, seq: int) -> str | None:
    """``live.locate(seq)``, or None from a source that cannot look events up (it is optional)."""
    locate = getattr(live, "locate", None)
    return locate(seq) if locate is not None else None


async def _live_call(live: Any, name: str, *args: Any) -> Any:
    """``live.a<name>(...)`` when the source has an async form, else ``<name>`` on a worker thread."""
    if live is None:
        return None
    native = getattr(live, f"a{name}", None)
    if native is not None:
        return await native(*args)
    return await asyncio.to_thread(getattr(live, name), *args)


def _interjection(message: Any, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Accept the spec's ``{"message": ..., **options}`` payload as well as a bare message."""
    if isinstance(message, Mapping) and "message" in message and "role" not in message:
        payload = dict(message)
        message = payload.pop("message")
        options = {**payload, **options}
    unknown = set(options) - _INTERJECT_OPTIONS
    if unknown:
        raise InvocationError(f"unknown interjection options {sorted(unknown)}; accepted: {sorted(_INTERJECT_OPTIONS)}")
    return message, options  # the runtime checks the message and metadata


def follow_events(execution: Execution, callback: Any) -> None:
    """Deliver every event of ``execution``'s run to ``callback``, from its first, on a thread.

    Nobody waits on this thread: a consumer that raises, or a runtime closed under
    it (the process shutting down), ends it with a log line instead of a traceback.
    """

    def follow() -> None:
        try:
            for event in execution.events():
                callback(event)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.warning("stopped following the events of run %s: %r", execution.run_id, exc)

    threading.Thread(target=follow, name=f"lg-follow-{execution.run_id[:8]}", daemon=True).start()



__all__ = [
    "follow_events",
    "EventStream",
    "Execution",
    "ExecutionBackend",
    "LiveSource",
    "STATES",
    "check_event_id",
    "event_json",
    "parse_event_id",
    "parse_resume_point",
    "state_of",
]
