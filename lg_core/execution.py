"""Execution: a handle on a run that executes in the background.

``Agent.start_execution(...)`` persists the run and returns at once; the run
executes on a thread of this process (embedded mode) or on Celery workers
(when ``broker_url`` is configured and ``lg_workers`` is installed). Either way
the handle works from any process: ``lg_core.get_execution(run_id)``.

Its events resume from an event id (:mod:`lg_core.execution_event_ids`): a
reconnecting client misses no durable event and sees none twice. One follow
algorithm (:mod:`lg_core.execution_follow`) serves ``for`` and ``async for``
over ``execution.events()`` (:mod:`lg_core.execution_readers`), and ``wait`` is
a plan of the same kind. Every other blocking method has an ``_async`` twin for
web apps (``examples/web_app.py``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from lg_core.agent_stream import encoded_wrapper
from lg_core.cancellation import CancellationToken
from lg_core.engine.codec import decode_event_data, encode_event_data
from lg_core.errors import (
    AgentInterjectionError,
    InvocationError,
)
from lg_core.events import StreamEvent, checked_consumer
from lg_core.execution_backend import ExecutionBackend, LiveSource
from lg_core.execution_event_ids import parse_resume_point
from lg_core.execution_follow import POLL_SECONDS, Plan, _Status, _Stored, _wait_plan
from lg_core.execution_readers import EventStream, adrive_events, drive
from lg_core.interjections import InterjectionResult, reply_wait, wait_timeout
from lg_core.store import RunRecord

if TYPE_CHECKING:
    from lg_core.run import Run
    from lg_core.runtime import Runtime

log = logging.getLogger(__name__)

STATES = ("pending", "running", "finished")
_INTERJECT_OPTIONS = frozenset({"metadata", "interjection_id"})


def event_json(event: StreamEvent) -> dict[str, Any]:
    """The event's data as JSON-safe values, e.g. for an SSE ``data:`` line.

    Events can carry inputs, tool arguments and results: check that the destination
    may see the whole run (the spec's safety note). A durable event is given as stored,
    so an error is in its caller-safe form (lg_core.engine._caller_errors) here too,
    never the live exception's own text.
    """
    if event.stored is not None:
        return dict(event.stored)
    if event.type == "agent_stream":
        return encoded_wrapper(event)
    return encode_event_data(event.data)


def state_of(record: RunRecord) -> str:
    """``pending`` (waiting for its session), ``running`` or ``finished``."""
    if record.finished:
        return "finished"
    return "pending" if record.status == "pending" else "running"


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

        It returns as soon as the run ends: it joins the thread of this process that
        executes the run, or waits on the run's live events for its terminal one (the
        store has the final word, and is polled when there is no live stream).

        ``deadline`` (an aware datetime) is the spec's absolute form of ``timeout``.
        Raises DeadlineExceededError when the time passes first; the run keeps going.
        An exception raised by the ``on_event`` consumer is re-raised here.
        """
        timeout = wait_timeout(timeout, deadline)
        limit = None if timeout is None else time.monotonic() + timeout
        if not self.backend.wait_local(self.run_id, timeout):
            live = self.backend.live_source(self.run_id)
            plan = _wait_plan(self.run_id, timeout, live is not None)
            for _event in drive(plan, self._read_store, self.run_id, live, limit=limit):
                pass
        return self._finished_run()

    async def wait_async(self, timeout: float | None = None, *, deadline: datetime | None = None) -> Run:
        """:meth:`wait` for async code.

        It waits on the loop (the run's live events, the store) until the run has
        finished and only then joins a thread of this process that executes or
        follows it (closing its resources is all that is left): joining from the
        start would hold one of the loop's few executor threads for the whole run,
        and keep holding it after the awaiting task was cancelled.
        """
        timeout = wait_timeout(timeout, deadline)
        limit = None if timeout is None else time.monotonic() + timeout
        live = self.backend.live_source(self.run_id)
        await self._adrive(_wait_plan(self.run_id, timeout, live is not None), limit, live)
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

    def reply(
        self,
        number: int,
        timeout: float | None = None,
        *,
        deadline: datetime | None = None,
        cancellation_token: CancellationToken | None = None,
    ) -> InterjectionResult:
        """Wait for the model's reply to interjection ``number`` (what :meth:`interject` returned).

        Returns as soon as the model turn that read it has committed; tool calls
        the reply asked for run after that. ``timeout`` / ``deadline`` /
        ``cancellation_token`` end the wait (DeadlineExceededError /
        CancelledError), never the run. Raises AgentInterjectionError when the run
        ended without a turn reading it, RunNotFoundError for an unknown number.
        """
        return reply_wait(self.runtime.store, self.run_id, number, timeout, deadline, cancellation_token).block()

    async def reply_async(
        self,
        number: int,
        timeout: float | None = None,
        *,
        deadline: datetime | None = None,
        cancellation_token: CancellationToken | None = None,
    ) -> InterjectionResult:
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

    # -- store reads: what the readers' plans ask of the run store ---------------------------------

    def _stored(self, after: int, until: int | None = None) -> list[StreamEvent]:
        records = self.runtime.store.load_events(self.run_id, after)
        return [
            StreamEvent(r.type, MappingProxyType(decode_event_data(r.data)), r.seq)
            for r in records
            if until is None or r.seq <= until
        ]

    def _read_store(self, request: _Stored | _Status) -> Any:
        return self._stored(request.after, request.until) if isinstance(request, _Stored) else self.record()

    async def _adrive(self, plan: Plan, limit: float | None = None, live: LiveSource | None = None) -> None:
        async for _event in adrive_events(plan, self._read_store, self.run_id, live, limit=limit):
            pass


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
    "Execution",
    "ExecutionBackend",
    "LiveSource",
    "STATES",
    "event_json",
    "state_of",
]
