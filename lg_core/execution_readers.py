"""The readers of a run's events: they perform what a follow plan asks, blocking or awaiting.

``for event in execution.events()`` drives the plan (:mod:`lg_core.execution_follow`)
with blocking calls; ``async for event in execution.events()`` drives the same plan
with awaitables (``redis.asyncio`` for the live stream, the short store queries on
worker threads), so there are no two hand-maintained pipelines. The live source is the
backend's (Redis streams, or an in-process one); the run store backfills what it lacks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from lg_core.events import StreamEvent
from lg_core.execution_backend import LiveSource
from lg_core.execution_follow import (
    ANNOUNCED_EARLIER,
    Plan,
    _Covers,
    _Emit,
    _End,
    _Follow,
    _Locate,
    _ReadLive,
    _Status,
    _Stored,
)
from lg_core.store.outage_waits import aread_through_outage, read_through_outage

if TYPE_CHECKING:
    from lg_core.execution import Execution

# Answers a plan's request for the run as stored now (_Status) or its stored events (_Stored).
StoreRead = Callable[[_Stored | _Status], Any]


def drive(
    plan: Plan, read_store: StoreRead, run_id: str, live: LiveSource | None = None, *, limit: float | None = None
) -> Generator[StreamEvent, None, Any]:
    """Run ``plan`` with blocking I/O, yielding what it emits; returns the plan's value.

    A store read (``read_store(request)``) waits out an outage of the database, up to ``limit``
    (monotonic) if given.
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
        elif isinstance(request, _End):
            reply = _end(live)
        elif isinstance(request, (_Stored, _Status)):
            reply = read_through_outage(partial(read_store, request), run_id, limit)
        else:
            time.sleep(request.seconds)


async def adrive_events(
    plan: Plan, read_store: StoreRead, run_id: str, live: Any = None, limit: float | None = None
) -> AsyncIterator[StreamEvent]:
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
            elif isinstance(request, _End):
                reply = await asyncio.to_thread(_end, live)
            elif isinstance(request, (_Stored, _Status)):
                reply = await aread_through_outage(partial(read_store, request), run_id, limit)
            else:
                await asyncio.sleep(request.seconds)
    finally:
        closing = getattr(live, "aclose", None)
        if closing is not None:
            await closing()


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
        return drive(self._plan(live), self.execution._read_store, self.execution.run_id, live)

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        live = self.execution.backend.live_source(self.execution.run_id)
        return adrive_events(self._plan(live), self.execution._read_store, self.execution.run_id, live)


def _locate(live: Any, seq: int) -> str | None:
    """``live.locate(seq)``, or None from a source that cannot look events up (it is optional)."""
    locate = getattr(live, "locate", None)
    return locate(seq) if locate is not None else None


def _end(live: Any) -> str | None:
    """``live.end()``; "0" (its start) from a source that cannot say where it ends (it is optional)."""
    if live is None:
        return None
    end = getattr(live, "end", None)
    return end() if end is not None else "0"


async def _live_call(live: Any, name: str, *args: Any) -> Any:
    """``live.a<name>(...)`` when the source has an async form, else ``<name>`` on a worker thread."""
    if live is None:
        return None
    native = getattr(live, f"a{name}", None)
    if native is not None:
        return await native(*args)
    return await asyncio.to_thread(getattr(live, name), *args)


__all__ = ["EventStream", "StoreRead", "adrive_events", "drive"]
