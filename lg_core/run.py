"""Run: one top-level execution, as the caller sees it.

``Agent.ask`` returns a finished Run; ``Agent.stream_ask`` returns a dormant
Run that executes while you iterate it and yields StreamEvents. A Run
executes once. Whatever happens inside (model errors, limits, cancellation,
a deadline) becomes its ``outcome``; only input and configuration errors (before
a Run exists) and cleanup failures raise.

The Run also owns resources registered with :meth:`register` and closes them
in reverse order when execution ends.
"""

from __future__ import annotations

import contextvars
import inspect
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from lg_core.agent_stream import standalone_wrapper
from lg_core.cancellation import CancellationToken, token_or_new
from lg_core.engine.codec import decode_event_data, error_from_dict
from lg_core.entrypoints import STACK_DIR_VARIABLE, check_importable_elsewhere, import_entrypoint
from lg_core.errors import (
    ERRORS_INCLUDING_CONTROL_FLOW,
    AgentInterjectionError,
    CleanupError,
    ConfigurationError,
    Error,
    RunNotFoundError,
    RunStateError,
)
from lg_core.events import (
    ASYNC_CONSUMER,
    TERMINAL_EVENTS,
    StreamEvent,
    checked_consumer,
    is_async_consumer,
)
from lg_core.execution_state import ExecutionState
from lg_core.execution_state import restored as restored_execution_state
from lg_core.interjections import InterjectionResult, ReplyWait, reply_seconds
from lg_core.invocation import Invocation
from lg_core.messages import Message
from lg_core.run_context import RunContext
from lg_core.run_result import RunResult
from lg_core.session import Session
from lg_core.store import RunRecord
from lg_core.usage import Usage

if TYPE_CHECKING:
    from lg_core.agent import Agent
    from lg_core.runtime import Runtime


_OUTCOMES = tuple(TERMINAL_EVENTS)
_TERMINAL_TYPES = {v: k for k, v in TERMINAL_EVENTS.items()}
_DONE = object()


class Run:
    """The record of one trip through LittleGhost."""

    def __init__(
        self,
        entrypoint_class: type,
        invocation: Invocation,
        runtime: Runtime,
        *,
        cancellation_token: CancellationToken | None = None,
        on_event: Callable[[StreamEvent], None] | None = None,
    ) -> None:
        self.entrypoint_class = entrypoint_class
        self.invocation = invocation
        self.id = invocation.run_id
        self.operation_id = self.id
        # Whose session this run reads and appends to (Configuration.session_actor),
        # decided when the run starts and stored with it.
        self.session_actor_id: str | None = invocation.actor_id
        self.runtime = runtime
        # Checked before a Run exists: a wrong value would be stored as a run that fails at its first check.
        token = token_or_new(cancellation_token)
        # The run's own token, a child of the caller's when one is given: cancelling the
        # caller's stops the run, while the run stopping itself (cancel(), a consumer that
        # failed or stopped reading, a cancel requested through the store) leaves the
        # caller's token, maybe shared with its other runs, alone ("flows only downward").
        self.cancellation_token = token if cancellation_token is None else token.child()
        self.outcome: str | None = None
        self.response: str | None = None
        self.error: BaseException | None = None
        self.usage = Usage()
        self.result: RunResult | None = None
        self.diagnostics: list[dict[str, Any]] = []
        self.tool_errors: list[BaseException] = []
        self._on_event: Callable[[StreamEvent], None] | None = checked_consumer(on_event)
        self._phase = "dormant"
        self._lock = threading.Lock()
        self._closers: list[Callable[[], Any]] = []
        self._closed = False
        self.cleanup_error: BaseException | None = None  # the first failure of close(), raised by it
        self._once_lock = threading.Lock()
        self._deliver_lock = threading.Lock()
        self._delivery_error: BaseException | None = None
        self._model: Any = None
        # Set when a commit in this process ended the run: a local step not started yet is then never started.
        self._ended_here = False
        # The run row's created_at and finished_at when this process wrote them (Engine.start, its ending).
        self._created_at: float | None = None
        self._finished_at: float | None = None
        self._stored_entrypoint: str | None = None
        # (parent run id, step key) of the step whose child run this is: its ending wakes that step if parked.
        self.parent_step: tuple[str, str] | None = None
        # Set when that step executes this run inline, on this thread, to its end: it never parks on
        # it, so the ending wakes nothing (child_runs.start_or_find_child).
        self.parent_waits_inline = False
        self._session: Session | None = None
        # The builder's AssemblyDefinition the run executes (entrypoint: its implementation class), else None.
        self.assembly_definition: Any = None
        # The ExecutionState of the code that built the run; current around each of its steps.
        self.execution_state: Mapping[str, Any] = ExecutionState.capture()

    # -- identity ------------------------------------------------------------------------

    @property
    def entrypoint_path(self) -> str:
        cls = self.entrypoint_class
        return self._stored_entrypoint or f"{cls.__module__}:{cls.__qualname__}"

    @property
    def agent_class(self) -> type[Agent] | None:
        """The entrypoint when it is an Agent (its ``assembly_kind`` says so), else None."""
        cls = self.entrypoint_class
        return cls if isinstance(cls, type) and getattr(cls, "assembly_kind", None) == "agent" else None

    @property
    def session(self) -> Session | None:
        """The Session this run reads and appends to; None when sessions are disabled.

        The same conversation the run continues (its invocation's ``session_id``
        and the run's persistence actor, in the runtime's store), so an
        application can read or checkpoint it without rebuilding the key. Once
        the run completed, it holds the run's turn (_settle_session), so it is
        the base of the application's next update.
        """
        store = self.runtime.session_store
        if store is None:
            return None
        if self._session is None or self._session.actor_id != self.session_actor_id:
            # (Re)built once the run's start has decided its actor (Configuration.session_actor).
            self._session = Session(
                self.invocation.session_id, store=store, actor_id=self.session_actor_id, operation_id=self.operation_id
            )
        return self._session

    # -- outcome ---------------------------------------------------------------------------

    @property
    def completed(self) -> bool:
        return self.outcome == "completed"

    @property
    def failed(self) -> bool:
        """True after execution or cleanup failed (the outcome itself is not rewritten by cleanup)."""
        return self.outcome == "failed" or self.cleanup_error is not None

    @property
    def partial(self) -> bool:
        return self.outcome == "partial"

    @property
    def cancelled(self) -> bool:
        return self.outcome == "cancelled"

    @property
    def include_agent_events(self) -> bool:
        """Whether the stream carries every Agent's contextual ``agent_stream`` events
        (lg_core.agent_stream): as asked, else on for a composite assembly, off for an Agent."""
        asked = self.invocation.get("include_agent_events")
        return getattr(self.entrypoint_class, "assembly_kind", "agent") != "agent" if asked is None else bool(asked)

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.entrypoint_path} outcome={self.outcome}>"

    # -- execution ---------------------------------------------------------------------------

    def call(self) -> Run:
        """Execute to the end and return ``self`` (what ``ask`` does)."""
        self._begin()
        try:
            self.runtime.execute(self)
        finally:
            self._phase = "finished"
            self.close()
        if self._delivery_error is not None:
            # The spec: a failure delivering events raises, because the caller did not
            # see a clean ending. The run itself ended (cancelled) and is recorded.
            raise self._delivery_error
        return self

    def __iter__(self) -> Iterator[StreamEvent]:
        """Execute while yielding every event; iterate once."""
        self._begin()
        # The run executes on its own thread, which inherits no context variables: it
        # gets the caller's, so its steps see what they see under ask() (the spec runs
        # stream_ask "on the caller's fiber or thread"): with_configuration, app state.
        return self._stream(contextvars.copy_context())

    def _stream(self, caller: contextvars.Context) -> Iterator[StreamEvent]:
        events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        forward = self._on_event
        self._on_event = events.put
        failure: list[BaseException] = []

        def drive() -> None:
            try:
                self.runtime.execute(self)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
                failure.append(exc)
            finally:
                events.put(_DONE)

        thread = threading.Thread(target=caller.run, args=(drive,), name=f"lg-run-{self.id[:8]}", daemon=True)
        thread.start()
        try:
            while True:
                item = events.get()
                if item is _DONE:
                    break
                if forward is not None:
                    forward(item)
                yield item
        finally:
            # A consumer that stops at the terminal event stopped nothing: the thread only
            # ends its publishing of a run that has ended.
            if thread.is_alive() and not self.finished:
                self.cancel("the stream consumer stopped reading")
            thread.join()
            self._phase = "finished"
            self.close()
        if failure:
            raise failure[0]

    def _begin(self) -> None:
        with self._lock:
            if self._phase != "dormant":
                raise Error(
                    f"run {self.id} has already executed; a Run executes only once, so call ask() again for a new run"
                )
            self._phase = "running"

    @property
    def observes_every_event(self) -> bool:
        """Whether a consumer (``on_event``, a stream) reads this run's events as they happen
        (lg_core.engine._event_bus): without one, only the terminal event matters here."""
        return self._on_event is not None

    def deliver(self, event: StreamEvent) -> None:
        """Receive one event from the engine; parallel steps deliver from several
        threads, so the consumer is called serially under a lock (as the spec promises)."""
        with self._deliver_lock:
            outcome = _TERMINAL_TYPES.get(event.type)
            if outcome is not None:
                self._finish_from(outcome, event.data, read_back=event.stored is None)
            if self._on_event is not None and self._delivery_error is None:
                try:
                    own_wrapper = standalone_wrapper(self, event)
                    if own_wrapper is not None:  # the contextual projection comes before the ordinary event
                        _refuse_awaitable(self._on_event(own_wrapper), ASYNC_CONSUMER)
                    _refuse_awaitable(self._on_event(event), ASYNC_CONSUMER)  # e.g. a lambda calling an async function
                except Exception as exc:  # noqa: BLE001 - the run stops cleanly, then ask() raises it
                    self._delivery_error = exc
                    if outcome is None:  # after the terminal event there is nothing left to stop
                        self.cancellation_token.cancel("the event consumer failed")

    def _finish_from(self, outcome: str, data: Any, read_back: bool = False) -> None:
        if self.outcome is None:
            self._settle_session(outcome)
        self.outcome = outcome
        self.response = data.get("response")
        usage = data.get("usage")
        self.usage = usage if isinstance(usage, Usage) else Usage.from_dict(usage)
        self.error = _reported_error(self.runtime, self.id, data.get("error"), read_back)
        result = data.get("result")
        if isinstance(result, RunResult):
            self.result = result

    def cancel(self, reason: str | None = None) -> Run:
        """Request cooperative cancellation, here and for other processes via the store.

        Stops this run only: a token the caller passed in is not cancelled.
        """
        self.cancellation_token.cancel(reason)
        try:
            self.runtime.cancel(self.id, reason)  # the store's flag, or the end of a pending run
        except Exception:  # noqa: BLE001 - the token already stops work in this process
            pass
        return self

    # -- interjections ---------------------------------------------------------------------------

    def interject(
        self,
        message: Any,
        *,
        interjection_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        timeout: float | None = None,
        deadline: datetime | None = None,
        cancellation_token: CancellationToken | None = None,
    ) -> InterjectionResult:
        """Add a user message to this active run and wait for the model's reply to it.

        The run's next model turn reads the message; this returns once that turn
        has committed, with its text and whether it asked for tools (which the run
        executes afterwards). Works wherever the run executes, since both the
        message and the reply go through the store. ``interjection_id`` makes a
        retried call idempotent. ``timeout`` / ``deadline`` / ``cancellation_token``
        end only the wait. Raises AgentInterjectionError before the run has started
        and after it finished (or when it ends without reading the message).
        """
        seconds = reply_seconds(timeout, deadline, cancellation_token)  # checked before anything is added
        try:
            number = self.runtime.interject(self.id, message, metadata=metadata, interjection_id=interjection_id)
        except RunNotFoundError:
            raise AgentInterjectionError(
                f"run {self.id} has not started; interject once it runs (ask_async, stream_ask or start_execution)"
            ) from None
        return ReplyWait(self.runtime.store, self.id, number, seconds, cancellation_token).block()

    # -- resources -----------------------------------------------------------------------------

    def register(self, resource: Any = None, closer: Callable[[], Any] | None = None) -> Any:
        """Add a resource (with ``close()``) or a closer to reverse-order cleanup."""
        if closer is None:
            if resource is None or not callable(getattr(resource, "close", None)):
                raise TypeError("register() needs a resource with close() or a closer callable")
            closer = resource.close
        elif not callable(closer):
            raise TypeError(f"register(closer=...) needs a callable, got {type(closer).__name__}")
        if is_async_consumer(closer):  # an async def, or an object whose __call__ is one
            raise TypeError(ASYNC_CLOSER)
        with self._lock:
            if self._closed:
                raise Error(f"run {self.id} has closed; it cannot register more resources")
            self._closers.append(closer)
        return resource

    def close(self) -> None:
        """Close registered resources in reverse order; idempotent; raises the first failure."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        failures = _run_closers(self._closers)
        if failures:
            # The spec: "raises the first CleanupError, or otherwise the first cleanup exception".
            self.cleanup_error = next((f for f in failures if isinstance(f, CleanupError)), failures[0])
            raise self.cleanup_error

    def once(self, key: str, block: Callable[[], Any]) -> Any:
        """Run ``block`` at most once successfully for ``key`` in this run (durably).

        Concurrent callers, on any thread or worker of the run, are serialized
        (lg_core.engine.run_once); the one that performs the block gets its value,
        the others None. A block that raises leaves the key free to try again.
        """
        from lg_core.engine.run_once import perform_once  # the engine imports this module

        with self._once_lock:  # this process's callers queue here, not on the store
            return perform_once(self, key, block)

    def context(self, state: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None) -> RunContext:
        return RunContext(
            state=state,
            cancellation_token=self.cancellation_token,
            deadline=self.invocation.deadline_at,
            metadata=metadata,
        )

    def record_diagnostic(self, entry: dict[str, Any], error: BaseException | None = None) -> None:
        with self._lock:
            self.diagnostics.append(entry)
            if error is not None:
                self.tool_errors.append(error)

    # -- stored runs --------------------------------------------------------------------------

    def events(self, after: int = 0) -> list[StreamEvent]:
        """The durable event log of this run (token deltas are not stored)."""
        return [
            StreamEvent(r.type, MappingProxyType(decode_event_data(r.data)), r.seq)
            for r in self.runtime.store.load_events(self.id, after)
        ]

    @classmethod
    def from_record(cls, record: RunRecord, runtime: Runtime, *, to_end: bool = False) -> Run:
        """A Run object for a stored run (finished or not).

        An unfinished run needs its entrypoint class to continue; a finished one
        can be inspected, and one being ended (``to_end``: recovery failing it)
        can be ended, even where the class cannot be imported.
        """
        try:
            entrypoint: Any = import_entrypoint(record.entrypoint)
        except RunStateError:
            if not (record.finished or to_end):
                raise
            entrypoint = None
        run = cls(entrypoint, Invocation.restore(record.invocation), runtime)
        run._stored_entrypoint = record.entrypoint
        if record.parent_run_id is not None and record.parent_step_key is not None:
            run.parent_step = (record.parent_run_id, record.parent_step_key)
        run.session_actor_id = record.actor_id
        run.execution_state = restored_execution_state(record.execution_state)
        if record.finished:
            run._phase = "finished"
            run._closed = True
            run._load_outcome(record)
        return run

    def _settle_session(self, outcome: str) -> None:
        """A completed run's Session, if it was read before the run ended (by a hook, a
        tool), reads the store again: it then holds the run's turn. Called once, when
        the run's outcome arrives."""
        session = self._session
        if outcome == "completed" and session is not None and session.actor_id == self.session_actor_id:
            session._reload_after_run_write()  # (a Session of another actor is rebuilt by the property anyway)

    def _load_outcome(self, record: RunRecord) -> None:
        if self.outcome is None:
            self._settle_session(record.status)
        self.outcome = record.status
        self.response = record.response
        self.usage = Usage.from_dict(record.usage)
        self.error = error_from_dict(record.error)
        restore = getattr(self.entrypoint_class, "stored_result", None)
        if record.result is not None and restore is not None:  # a composite assembly's result (its trajectory)
            self.result = restore(record.result)
        elif record.result is not None:
            messages = tuple(Message.from_dict(m) for m in self.runtime.store.load_messages(f"{self.id}/root"))
            spec = self.agent_class.result_spec() if self.agent_class is not None else None
            structured = record.result.get("structured_result")
            output = spec.output(structured["value"]) if spec is not None and structured else None
            self.result = RunResult.from_dict(record.result, messages, output)

    def refresh(self) -> Run:
        """Reload the outcome from the store (for runs executed elsewhere)."""
        record = self.runtime.store.load_run(self.id)
        if record.finished:
            self._load_outcome(record)
        return self


def _reported_error(runtime: Runtime, run_id: str, raw: Any, read_back: bool) -> BaseException | None:
    """The error a terminal event reports: the exception itself when the event is live in this
    process; for an event ``read_back`` from the store or a broker, whose ``error`` is only the
    caller-safe form, the stored run's error, which keeps what the application may see."""
    error: BaseException | None = error_from_dict(raw) if isinstance(raw, Mapping) else raw
    if not read_back or error is None:
        return error
    try:
        stored = runtime.store.load_run(run_id).error
    except Exception:  # noqa: BLE001 - the event's own form is still an answer
        return error
    return error_from_dict(stored) if stored else error


def prepared_by(run: Run, hooks: Sequence[Any]) -> Run:
    """``run`` after every hook's ``prepare_run`` (a new run's, and one rebuilt by a worker, resume or retry).

    A hook that raises leaves no Run for the caller to close, so the resources
    earlier hooks registered are closed here before the error is raised (the spec:
    "if construction stops halfway through, Runtime closes the partial resources").
    """
    try:
        for hook in hooks:
            prepared = hook.prepare_run(run)
            if prepared is not None and not isinstance(prepared, Run):
                # Caught here, not later as "'bool' object has no attribute 'call'" with the hooks' resources left open.
                raise ConfigurationError(
                    f"{type(hook).__name__}.prepare_run must return the Run it was given (or another Run, or None), "
                    f"got {type(prepared).__name__}"
                )
            run = prepared or run
    except BaseException:
        try:
            run.close()
        except ERRORS_INCLUDING_CONTROL_FLOW:  # the hook's failure is the error worth raising
            pass
        raise
    return run


# Why not run it with asyncio.run: an async resource (an asyncpg connection, an aiohttp
# session) belongs to the event loop that opened it, and closing it on a new loop fails.
ASYNC_CLOSER = (
    "the closer is async, and the run closes its resources on the thread executing the run, where its "
    "coroutine would never run: register a plain function that closes the resource on its own event loop, "
    "e.g. closer=lambda: asyncio.run_coroutine_threadsafe(connection.close(), loop).result()"
)


def _refuse_awaitable(returned: Any, problem: str) -> None:
    """TypeError(``problem``) when a plain callback returned an awaitable: nothing here would await it."""
    if inspect.isawaitable(returned):
        if inspect.iscoroutine(returned):
            returned.close()  # never run: no "was never awaited" warning on top
        raise TypeError(problem)


def _run_closers(closers: list[Callable[[], Any]]) -> list[BaseException]:
    """Empty ``closers`` in place (so they run once) and run them newest first; returns the failures."""
    pending = list(reversed(closers))
    closers.clear()
    failures: list[BaseException] = []
    for closer in pending:
        try:
            _refuse_awaitable(closer(), ASYNC_CLOSER)  # e.g. a lambda calling an async close
        # Every closer runs. A closer checking the run's (cancelled) token raises
        # CancelledError, a BaseException here but an ordinary error in the spec.
        except ERRORS_INCLUDING_CONTROL_FLOW as exc:
            failures.append(exc)
    return failures


__all__ = ["STACK_DIR_VARIABLE", "Run", "check_importable_elsewhere", "import_entrypoint", "prepared_by"]
