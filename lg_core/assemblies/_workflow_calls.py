"""The host a Workflow run's ``perform`` calls through: each ``invoke`` a child run, answered by replay.

A Workflow run is durable by deterministic replay. ``perform`` is ordinary Python, so it
cannot be suspended mid-way and stored; instead it is run again from the top whenever it
must wait, and every call it made before is answered from the workflow frame's record
(``calls``, by the call's position) without running the child again. A call's record holds
what a replay must ask for again at that position (its signature, checked with
``check_same_call``), every attempt's child run, and, once settled, its outcome.

Each attempt of a call is a child run whose id is derived from the workflow run, the call's
position and the attempt's number (``call-<index>/attempt-<n>``), so a replay, a woken step
or a step executed again after its worker died finds the child instead of starting another.

How a call that is not settled yet is answered depends on where the step runs. In a local
run (no broker) the child runs on this thread (``parallel`` on a pool of threads), and then
``perform`` is run again from the top (:class:`ReplayAgain`), exactly as a worker's step
is when woken. On a worker the child is started on the workers and ``perform`` stops with
:class:`WaitingForChildren`: the step parks, holding no thread, until a child's ending wakes it.
A call whose next attempt waits out its ``retry_delay`` waits on this thread in a local run, and on
a worker makes the step park with a timer too (``WaitingForChildren.wake_at``, the soonest such time).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

from lg_core.assemblies._graph_frame import node_result
from lg_core.assemblies._step_attempts import (
    attempt_deadline,
    delay_over,
    ended_attempt,
    retry_not_before,
    settles,
    stored_span,
)
from lg_core.assemblies.child_runs import start_or_find_child, step_child_id, stream_step
from lg_core.assemblies.swarm_members import register_no_seat
from lg_core.assemblies.trajectory import bounded_output
from lg_core.assemblies.workflow_invocation import WorkflowInvocation, check_same_call
from lg_core.engine.codec import error_from_dict, error_to_dict
from lg_core.engine.driven_frames import run_history
from lg_core.errors import AssemblyError, ConfigurationError, ReplayDivergenceError, RunNotFoundError
from lg_core.events import StreamEvent
from lg_core.run import Run
from lg_core.run_result import RunResult

if TYPE_CHECKING:
    from lg_core.engine.driven_frames import StepScope

_FORWARDED = frozenset({"message_start", "text_delta"})
SETTLED: Final = "settled"
QUEUED: Final = "queued"
DELAYED: Final = "delayed"


class WaitingForChildren(BaseException):  # noqa: N818 - a control signal, not an error
    """``perform`` needs the outputs of child runs still running on workers: the step parks.

    A BaseException, so that a ``perform`` catching ``Exception`` around a call cannot swallow it."""

    def __init__(self, running: Sequence[str], wake_at: float | None = None) -> None:
        super().__init__(f"waiting for child runs {', '.join(running)}" + (f" or until {wake_at}" if wake_at else ""))
        self.running = list(running)
        self.wake_at = wake_at  # when a call's retry_delay ends: the step's timer (None without one)


class ReplayAgain(BaseException):  # noqa: N818 - a control signal, not an error
    """A local step ran a child to its end: ``perform`` runs again from the top, as a woken step's does."""


class ReplayHost:
    """Answers one execution of ``perform``: recorded calls from the frame, the others by child runs."""

    def __init__(self, scope: StepScope, calls: dict[str, dict[str, Any]], workflow: str) -> None:
        self.scope, self.workflow = scope, workflow
        self.calls = calls  # the frame's call records, updated in place as children settle
        self.local = scope.holder is None
        self.asked: set[str] = set()  # the positions this execution of perform asked for
        self.divergence: ReplayDivergenceError | None = None
        self.ran_child = False  # a local child ran to its end in this execution
        self.final: WorkflowInvocation | None = None  # the call perform returned, whose text streams to the caller
        self.wake_at: float | None = None  # the soonest time a delayed call's next attempt may start (workers)
        self._lock = threading.Lock()

    # -- WorkflowHost ----------------------------------------------------------------------

    def run_invocation(self, invocation: WorkflowInvocation) -> RunResult:
        """The call's RunResult once settled; its error when it failed; else wait or replay."""
        state = self.settle(invocation, may_start=True)
        if state == DELAYED:
            raise WaitingForChildren([], self.wake_at)
        if state != SETTLED:
            raise WaitingForChildren([state])
        if self.ran_child:
            raise ReplayAgain
        return self.result_of(invocation)

    def run_parallel(self, invocations: Sequence[WorkflowInvocation], max_concurrency: int | None) -> list[RunResult]:
        """Settle every call (at most ``max_concurrency`` children running at once); their RunResults in order."""
        if self.local:
            with ThreadPoolExecutor(max_workers=max_concurrency or len(invocations)) as pool:
                list(pool.map(lambda invocation: self.settle(invocation, may_start=True), invocations))
        else:
            running: list[str] = []
            for invocation in invocations:
                state = self.settle(invocation, may_start=max_concurrency is None or len(running) < max_concurrency)
                if state not in (SETTLED, QUEUED, DELAYED):
                    running.append(state)
            if running or self.wake_at is not None:
                raise WaitingForChildren(running, self.wake_at)
        if self.ran_child:
            raise ReplayAgain
        return [self.result_of(invocation) for invocation in invocations]

    # -- one call --------------------------------------------------------------------------

    def settle(self, invocation: WorkflowInvocation, *, may_start: bool) -> str:
        """SETTLED when the call's outcome is recorded, QUEUED when it may not start yet, DELAYED when
        its next attempt waits out its ``retry_delay`` on a worker (``wake_at`` then says until when),
        else the id of its child run still running on the workers."""
        request = invocation.request
        record = self._record_for(invocation)
        self._check_supported(invocation)
        while record.get("outcome") is None:
            number = len(record["attempts"]) + 1
            child_id = step_child_id(self.scope, f"{self.scope.key}/call-{request.index}/attempt-{number}")
            if not may_start and not self._exists(child_id):
                return QUEUED
            if not self._delay_over(request.policy, record, child_id):
                return DELAYED
            register_no_seat(child_id)
            step = stream_step(self.scope, request.name, f"{self.scope.key}/call-{request.index}")
            child = start_or_find_child(
                self.scope,
                request.participant,
                self._input_of(invocation),
                child_id,
                step,
                **self._options_of(invocation),
            )
            if child is None:
                return child_id
            if self.local:
                self.ran_child = True
            self.scope.check_interrupt()  # a child stopped by the workflow's cancel or deadline: the run stops too
            self._add_attempt(record, invocation, number, child_id, child)
        return SETTLED

    def result_of(self, invocation: WorkflowInvocation) -> RunResult:
        """A settled call's RunResult, or its child's error raised when it failed."""
        record = self.calls[str(invocation.request.index)]
        if record["outcome"] == "completed":
            return node_result(record)
        error = error_from_dict(record["attempts"][-1].get("error_data"))
        raise error or AssemblyError(f"workflow call {record['name']} failed")

    def _record_for(self, invocation: WorkflowInvocation) -> dict[str, Any]:
        """The call's record, checked against what this replay asks; a new one for a first call."""
        request = invocation.request
        key = str(request.index)
        with self._lock:
            self.asked.add(key)
            record = self.calls.get(key)
            if record is None:
                record = {"signature": request.signature(), "name": request.name, "attempts": [], "outcome": None}
                self.calls[key] = record
                return record
        try:
            check_same_call(record["signature"], request, self.workflow)
        except ReplayDivergenceError as error:
            self.divergence = self.divergence or error  # recorded even when perform catches it
            raise
        return record

    def _check_supported(self, invocation: WorkflowInvocation) -> None:
        """ConfigurationError for what a Workflow run cannot honour yet, rather than ignoring it."""
        participant = invocation.request.participant
        if not isinstance(participant, type) or not callable(getattr(participant, "build_run", None)):
            raise ConfigurationError(
                f"{self.workflow}: call {invocation.request.name} gives {participant!r}, which cannot run as a "
                "child run yet (a Workflow call runs a class; a builder's AssemblyDefinition is a Graph node's only); "
                "invoke a class"
            )

    def _delay_over(self, policy: Any, record: dict[str, Any], child_id: str) -> bool:
        """Whether the call's next attempt may start now: no ``retry_delay`` to wait out (a local run
        waits it out here), or its child was started already. False notes the time in ``wake_at``."""
        not_before = retry_not_before(policy, record["attempts"][-1]) if record["attempts"] else None
        if not_before is None or time.time() >= not_before or self._exists(child_id):
            return True
        if delay_over(self.scope, not_before):
            return True
        with self._lock:
            self.wake_at = not_before if self.wake_at is None else min(self.wake_at, not_before)
        return False

    def _input_of(self, invocation: WorkflowInvocation) -> Any:
        given = invocation.request.input
        return self.scope.run.invocation.message if given is None else given

    def _options_of(self, invocation: WorkflowInvocation) -> dict[str, Any]:
        """The child's history, context and deadline: the call's own, else the workflow's (its history is
        the run's: its session's, else the invocation's)."""
        request, parent = invocation.request, self.scope.run.invocation
        history = run_history(self.scope) if request.history is None else request.history
        context = parent.context.to_dict() if request.context is None else request.context
        options: dict[str, Any] = {"history": list(history), "context": dict(context)}
        if self.local and invocation is self.final:
            options["on_event"] = self._forward_text
        options["deadline_at"] = attempt_deadline(request.policy, parent.deadline_at)
        return options

    def _forward_text(self, event: StreamEvent) -> None:
        """The final call's text, streamed to the workflow's caller as it is generated (live-only events:
        the answer itself is durable in the run's result)."""
        if event.type in _FORWARDED:
            self.scope.emit_event(StreamEvent.build(event.type, **event.data))

    def _exists(self, run_id: str) -> bool:
        try:
            self.scope.engine.store.load_run(run_id)
        except RunNotFoundError:
            return False
        return True

    def _add_attempt(
        self, record: dict[str, Any], invocation: WorkflowInvocation, number: int, child_id: str, child: Run
    ) -> None:
        """Record one ended attempt; settle the call unless its error is one to retry and attempts remain."""
        policy = invocation.request.policy
        span = stored_span(child, self.scope.engine.store)
        what = f"workflow call {invocation.request.name}"
        ended = ended_attempt(what, policy, number, child, span, self.scope.run.invocation.deadline_at)
        error = ended.error
        record["attempts"].append({**ended.record, "error_data": None if error is None else error_to_dict(error)})
        if error is None:
            result = child.result
            structured = None
            if result is not None and result.structured_result is not None:
                value, _cut = bounded_output(result.structured_result.value)
                structured = {"schema_name": result.structured_result.schema_name, "value": value}
            text, _cut = bounded_output(result.text if result is not None else (child.response or ""))
            record.update(outcome="completed", text=text, structured=structured, usage=child.usage.to_dict())
        elif settles(policy, number, error):
            record["outcome"] = "failed"


__all__ = ["DELAYED", "QUEUED", "SETTLED", "ReplayAgain", "ReplayHost", "WaitingForChildren"]
