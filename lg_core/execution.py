"""Execution: a handle on a run that executes in the background.

``Agent.start_execution(...)`` persists the run and returns at once; the run
executes on a thread of this process (embedded mode) or on Celery workers
(when ``broker_url`` is configured and ``lg_workers`` is installed). Either way
the handle works from any process: ``lg_core.get_execution(run_id)``.

Event ids (for Server-Sent Events' ``Last-Event-ID``) are ``"<seq>-<position>"``:
``seq`` is the highest durable event sequence number the reader has yielded,
``position`` its place in the live stream. Resuming from an id replays, from
the run store, any durable event the live stream no longer has (trimmed, or
lost with Redis), and skips any the client already saw; so a reconnecting
client misses no durable event and sees none twice. Token deltas live only in
the live stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from lg_core.engine.codec import decode_event_data
from lg_core.errors import DeadlineExceededError, InvocationError
from lg_core.events import StreamEvent
from lg_core.store import RunRecord

if TYPE_CHECKING:
    from lg_core.run import Run
    from lg_core.services import Runtime

STATES = ("pending", "running", "finished")


class LiveSource(Protocol):
    """Where live events of one run can be read in order (a Redis Stream, an in-process log)."""

    def covers(self, position: str) -> bool:
        """True if every entry after ``position`` is still available."""

    def read(self, position: str, block: float) -> list[tuple[str, StreamEvent]]:
        """Entries after ``position`` (waiting up to ``block`` seconds for one)."""


class ExecutionBackend(Protocol):
    """What a way of executing runs must provide to Execution handles."""

    def start(self, run: Run) -> None: ...

    def live_source(self, run_id: str) -> LiveSource | None: ...

    def wait_local(self, run_id: str, timeout: float | None) -> bool: ...


def parse_event_id(value: str | None) -> tuple[int, str]:
    if not value:
        return 0, "0"
    seq, _, position = str(value).partition("-")
    if not seq.isdigit():
        raise InvocationError(f"event id {value!r} is not one this run produced (expected '<seq>-<position>')")
    return int(seq), position or "0"


class Execution:
    """A background run: stream its events, wait, cancel, interject, from any process."""

    def __init__(self, run_id: str, runtime: Runtime, backend: ExecutionBackend) -> None:
        self.run_id = run_id
        self.runtime = runtime
        self.backend = backend

    def __repr__(self) -> str:
        return f"<Execution {self.run_id} {self.state}>"

    # -- state -----------------------------------------------------------------------

    def _record(self) -> RunRecord:
        return self.runtime.store.load_run(self.run_id)

    @property
    def state(self) -> str:
        """``pending`` (waiting for its session), ``running`` or ``finished``."""
        status = self._record().status
        if status == "pending":
            return "pending"
        return "running" if status == "running" else "finished"

    @property
    def run(self) -> Run | None:
        """The finished Run, or None while it executes."""
        record = self._record()
        return self.runtime.get_run(self.run_id) if record.finished else None

    def wait(self, timeout: float | None = None) -> Run:
        """Block until the run finishes and return it (the same kind of Run ``ask`` returns).

        Raises DeadlineExceededError when ``timeout`` passes first; the run keeps going.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.backend.wait_local(self.run_id, timeout):
            return self.runtime.get_run(self.run_id)
        delay = 0.01
        while True:
            record = self._record()
            if record.finished:
                return self.runtime.get_run(self.run_id)
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineExceededError(f"run {self.run_id} is still {record.status} after {timeout} s")
            remaining = None if deadline is None else deadline - time.monotonic()
            time.sleep(delay if remaining is None else max(0.0, min(delay, remaining)))
            delay = min(delay * 1.5, 0.25)

    def cancel(self) -> Execution:
        """Request cooperative cancellation (seen by whichever process runs the next step)."""
        self.runtime.cancel(self.run_id)
        return self

    def close(self, timeout: float | None = None) -> Run | None:
        """Cancel and wait for the run to stop; idempotent."""
        if self._record().finished:
            return self.runtime.get_run(self.run_id)
        self.cancel()
        return self.wait(timeout)

    def interject(self, message: Any, **options: Any) -> int:
        """Add a user message the run reads at its next model turn; returns its sequence number."""
        return self.runtime.interject(self.run_id, message, **options)

    # -- events -------------------------------------------------------------------------

    def events(self, after: str | None = None, *, poll_interval: float = 0.25) -> Iterator[StreamEvent]:
        """Every event from ``after`` (an event id) to the terminal event; each has ``.id``."""
        seen, position = parse_event_id(after)
        live = self.backend.live_source(self.run_id)
        if live is None or not live.covers(position):
            for event in self._stored(seen):
                seen = event.seq
                yield replace(event, id=f"{seen}-{position}")
                if event.terminal:
                    return
        while True:
            entries = live.read(position, block=poll_interval) if live is not None else []
            for entry_position, event in entries:
                position = entry_position
                if event.seq is not None:
                    if event.seq <= seen:
                        continue
                    for missing in self._stored(seen, until=event.seq - 1):
                        seen = missing.seq
                        yield replace(missing, id=f"{seen}-{position}")
                    seen = event.seq
                yield replace(event, id=f"{seen}-{position}")
                if event.terminal:
                    return
            if not entries:
                finished, backlog = self._finished_backlog(seen)
                for event in backlog:
                    seen = event.seq
                    yield replace(event, id=f"{seen}-{position}")
                if finished:
                    return
                if live is None and not backlog:
                    time.sleep(poll_interval)

    def _stored(self, after: int, until: int | None = None) -> list[StreamEvent]:
        records = self.runtime.store.load_events(self.run_id, after)
        return [
            StreamEvent(r.type, _frozen(decode_event_data(r.data)), r.seq)
            for r in records
            if until is None or r.seq <= until
        ]

    def _finished_backlog(self, seen: int) -> tuple[bool, list[StreamEvent]]:
        """When the live stream is quiet: durable events it is missing, and whether the run ended."""
        record = self._record()
        if record.event_seq <= seen:
            return record.finished, []
        backlog = self._stored(seen)
        return record.finished or any(e.terminal for e in backlog), backlog

    async def aevents(self, after: str | None = None) -> AsyncIterator[StreamEvent]:
        """:meth:`events` for async code; blocking reads run on a worker thread."""
        iterator = self.events(after)
        done = object()
        while True:
            event = await asyncio.to_thread(next, iterator, done)
            if event is done:
                return
            yield event

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self.aevents()

    def __iter__(self) -> Iterator[StreamEvent]:
        return self.events()


def _frozen(data: dict[str, Any]) -> Any:
    from types import MappingProxyType

    return MappingProxyType(data)


__all__ = ["Execution", "ExecutionBackend", "LiveSource", "STATES", "parse_event_id"]
