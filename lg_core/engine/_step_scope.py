"""Shared machinery of one step: scope, events, interrupts and endings.

A step executes outside any transaction and produces a *transition*: a pure
function from the frame's latest state to the StepCommit to write. If the
commit loses an optimistic-version race (a parallel tool committed first),
the engine reloads the frame and calls the transition again; the expensive
work (model call, tool call) is never repeated for a conflict.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from lg_core.callbacks import run_chain
from lg_core.engine._caller_errors import caller_error_dict
from lg_core.engine._checkpoint import AgentCheckpoint, apply_state_changes, checked_state
from lg_core.engine._driven_checkpoint import DrivenCheckpoint
from lg_core.engine._frames import FrameState
from lg_core.engine.codec import encode_event_data, error_to_dict
from lg_core.engine.run_endings import RunEnding
from lg_core.errors import CancelledError, ConfigurationError, DeadlineExceededError, Error
from lg_core.events import LIVE_ONLY_EVENTS, PUBLISHED_AT_ONCE, TERMINAL_EVENTS, StreamEvent
from lg_core.messages import Message
from lg_core.run_context import NO_USAGE, RunContext
from lg_core.run_result import RunResult
from lg_core.sandbox.run_resources import NO_RESOURCES, RunResources
from lg_core.store import RunFinish, StepCommit
from lg_core.store.records import ended_step_status
from lg_core.tool import Binding
from lg_core.usage import Usage, accumulate

if TYPE_CHECKING:
    from lg_core.engine._preclaim import Follow
    from lg_core.engine._run_protocol import EngineRun
    from lg_core.engine.engine import Engine
    from lg_core.engine.step_kinds import StepKindName

Transition = Callable[[FrameState], StepCommit]
# How a run ends other than completed: failed, partial (its deadline passed) or cancelled.
EndOutcome = Literal["failed", "partial", "cancelled"]
T = TypeVar("T")
_NO_DEADLINE = math.inf
EventPair = tuple["StreamEvent | None", tuple[str, dict[str, Any]]]


@dataclass
class StepScope:
    """What one step works with: the run, its frame, the step key and attempt."""

    engine: Engine[Any]
    run: EngineRun
    frame: FrameState
    key: str
    kind: StepKindName | Literal["end"]  # "end": a run ended outside any step (Engine.end_run)
    attempt: int = 1
    input: dict[str, Any] | None = None
    holder: str | None = None
    # A worker's claim found an earlier attempt's mark that the step's at_most_once tool started.
    body_entered: bool = False
    # Picks the successor the worker runs next, which the commit claims for it (engine/_preclaim.py).
    follow: Follow | None = None
    durable: list[EventPair] = field(default_factory=list)
    outgoing: list[StreamEvent | None] = field(default_factory=list)
    context: RunContext | None = None
    # The frame this step opened (engine/_opening.py) while its messages are not stored:
    # the step's commit writes them ahead of its own.
    opening: FrameState | None = None
    # How the ending this step's latest transition built ends the run, for its task (run_endings).
    run_ending: RunEnding | None = None
    _deadline: float | None = None
    # The checkpoint of this step's latest commit, with the dict written for it
    # (commit_for): after the commit the frame cache takes the object as is.
    _committed: tuple[dict[str, Any], AgentCheckpoint] | None = None
    # The working state the context was built from: the step commits only its changes to it.
    _state_before: dict[str, Any] = field(default_factory=dict)
    # The workspace and sandbox this step's agent and tools are bound to (build_resources).
    resources: RunResources = NO_RESOURCES

    # -- collaborators --------------------------------------------------------

    @property
    def agent_class(self) -> Any:
        return self.run.entrypoint_class

    @property
    def built_context(self) -> RunContext:
        """``context``, for code that runs after ``build_context`` (a step's perform and what it calls)."""
        return cast(RunContext, self.context)

    def build_context(self, checkpoint: AgentCheckpoint) -> RunContext:
        self._state_before = checkpoint.state  # never mutated in place (AgentCheckpoint.copy)
        self.context = _StepContext(
            checkpoint.usage,
            state=checkpoint.state,
            cancellation_token=self.run.cancellation_token,
            deadline=self.run.invocation.deadline_at,
            metadata={"run_id": self.run.id, "frame": self.frame.path, "step": self.key},
            agent_operation_id=self.frame.id,
        )
        return self.context

    def state_for(self, state: FrameState) -> dict[str, Any]:
        """The working state to commit on ``state``: its own with this step's changes applied.

        Parallel tool calls commit one after another on the same frame, so each
        writes only what it changed (``apply_state_changes``), not its whole copy.
        ConfigurationError when the context's state holds a value JSON cannot
        (``checked_state``): the step then ends the run instead of committing.
        """
        return apply_state_changes(state.checkpoint.state, self._state_before, checked_state(self.built_context.state))

    def _ending_state(self, state: FrameState) -> dict[str, Any]:
        """The working state an ending writes: this step's (``state_for``), or, when that
        cannot be stored, ``state``'s own, as the frame's last commit left it.

        The step's state may be what failed it (``checked_state``): writing it again
        would fail the ending's commit too, and leave the run running, unended.
        """
        try:
            return self.state_for(state)
        except ConfigurationError:
            return state.checkpoint.state

    def add_step_usage(self, checkpoint: AgentCheckpoint) -> None:
        """Add this step's own usage to ``checkpoint.usage``.

        That is what its context accumulated since build_context: its model
        response's usage and what tools and callbacks recorded. A transition
        applies it to the frame's latest checkpoint, so a transition re-run after
        a version conflict (a parallel tool committed first) counts it once.
        """
        context = self.context
        if isinstance(context, _StepContext):
            added = context.added_usage
            if added is not NO_USAGE:  # else nothing was recorded: most tool calls
                checkpoint.usage = accumulate(checkpoint.usage, added)

    def build_resources(self) -> RunResources:
        """The run's workspace and sandbox for this step, built again from the settings (unopened).

        Nothing of them is kept between steps: the next step may run on another
        worker, or this one again after a crash (lg_core.sandbox.run_resources).
        """
        self.resources = self.engine.runtime.run_resources(self.run.id, self.run.invocation)
        return self.resources

    def build_agent(self, model: Any = None) -> Any:
        agent = self.agent_class(run=self.run, runtime=self.engine.runtime, model=model, context=self.context)
        # Set here, not passed: an application's Agent.__init__ may take only the original four arguments.
        agent.workspace, agent.sandbox = self.resources.workspace, self.resources.sandbox
        run_chain(agent, "after_initialize", agent, context=self.context)
        return agent

    def binding(self, agent: Any, model: Any, idempotency_key: str | None = None) -> Binding:
        resources = self.resources
        return Binding(
            agent=agent,
            run=self.run,
            runtime=self.engine.runtime,
            model=model,
            workspace=resources.workspace,
            sandbox=resources.sandbox,
            idempotency_key=idempotency_key,
        )

    # -- events -------------------------------------------------------------------

    def emit(self, type: str, /, **data: Any) -> None:
        self.emit_event(StreamEvent.build(type, **data))

    def emit_event(self, event: StreamEvent) -> None:
        """Live-only events go out now; durable ones go out, numbered, after the commit.

        ``model_retry`` is both: consumers must see it before the re-streamed
        deltas, and the log must record it.
        """
        if event.type in LIVE_ONLY_EVENTS:
            self.engine.publish(self.run.id, event)
        elif event.type in PUBLISHED_AT_ONCE:
            self.engine.publish(self.run.id, event)
            self.durable.append((None, (event.type, encode_event_data(event.data))))
        else:
            stored = encode_event_data(event.data)  # encoded once: stored, and what sinks publish
            self.durable.append((event.with_stored(stored), (event.type, stored)))

    @staticmethod
    def pair(type: str, /, stored_overrides: dict[str, Any] | None = None, **data: Any) -> EventPair:
        """A durable event made by a transition: (live form, stored form).

        ``stored_overrides`` are values already in their stored (JSON) form, used as they are: a
        run's encoded result is not walked again for each event that carries it.
        """
        overrides = stored_overrides or {}
        stored = encode_event_data({key: value for key, value in data.items() if key not in overrides})
        stored.update(overrides)
        return StreamEvent.build(type, **data).with_stored(stored), (type, stored)

    # -- interrupts ---------------------------------------------------------------

    def check_interrupt(self) -> None:
        """Raise CancelledError or DeadlineExceededError when the run should stop.

        Called for every streamed event, so the common case is three cheap tests.
        """
        run = self.run
        if self.holder is not None:  # a worker's claim: another worker may have taken the step over
            self.engine.heartbeat.check(run.id, self.key, self.attempt)
        token = run.cancellation_token
        if token.cancelled:
            token.raise_if_cancelled()
        if self.engine.cancel_requested(run.id):
            token.cancel("cancellation was requested")
            raise CancelledError()
        deadline = self._deadline
        if deadline is None:
            at = run.invocation.deadline_at
            deadline = self._deadline = _NO_DEADLINE if at is None else at.timestamp()
        if deadline != _NO_DEADLINE and time.time() >= deadline:
            raise DeadlineExceededError()

    # -- commits ------------------------------------------------------------------

    def commit_for(
        self, state: FrameState, checkpoint: AgentCheckpoint, extra: Sequence[EventPair] = (), **fields: Any
    ) -> StepCommit:
        """The commit of this step; its events are the step's durable ones plus ``extra``."""
        rows = fields.get("messages")
        if rows and (fields.get("consumed_interjections") or state.checkpoint.repairs):
            self._record_reply(fields, rows)
        pairs = [*self.durable, *extra]
        self.outgoing = [live for live, _stored in pairs]
        events = [stored for _live, stored in pairs]
        stored = checkpoint.to_dict()
        self._committed = (stored, checkpoint)
        return StepCommit(
            run_id=self.run.id,
            frame_id=state.id,
            expected_version=state.version,
            checkpoint=stored,
            step_key=self.key,
            holder=self.holder,
            events=events,
            **fields,
        )

    @staticmethod
    def _record_reply(fields: dict[str, Any], rows: Sequence[tuple[int, Any]]) -> None:
        """Name the model's reply in the step result: what Run.interject and Execution.reply wait for.

        Recorded by a turn that read interjections, and by every turn after a
        structured-result repair (the repair's commit points at the repairing
        turn with ``reply_in``, since the answer it rejected is no reply).
        """
        step_result = fields.get("step_result") or {}
        if "reply_in" in step_result:
            return
        reply = next((seq for seq, message in rows if message.role == "assistant"), None)
        if reply is not None:
            fields["step_result"] = {**step_result, "reply_message": reply}

    def committed_checkpoint(self, stored: dict[str, Any]) -> AgentCheckpoint:
        """The checkpoint a commit of this step wrote as ``stored``.

        The object commit_for serialized when ``stored`` is its dict (no need to
        parse back what was just written), else parsed from ``stored`` (a commit
        built elsewhere, e.g. an ending at the run's opening).
        """
        committed = self._committed
        if committed is not None and committed[0] is stored:
            return committed[1]
        return type(self.frame.checkpoint).from_dict(stored)  # a driven frame's, or an Agent's

    def ending(self, outcome: EndOutcome, error: BaseException | None, partial_text: str = "") -> Transition:
        """The transition that ends the run with ``outcome`` (failed, partial or cancelled)."""
        engine, run = self.engine, self.run

        def transition(state: FrameState) -> StepCommit:
            checkpoint = state.checkpoint.copy()
            checkpoint.phase = "done"
            self.add_step_usage(checkpoint)  # the failing step's model call counts too
            if self.context is not None:
                checkpoint.state = self._ending_state(state)
            response = None
            if outcome == "partial":
                response = partial_text or checkpoint.last_text
            usage = Usage.from_dict(checkpoint.usage)
            error_data = None if error is None else run_error_to_dict(error, run.entrypoint_class)  # for operators
            message = engine.safe_error_message(error, run) if error is not None else None  # for callers
            terminal = self.pair(
                TERMINAL_EVENTS[outcome],
                {"error": None if error is None else caller_error_dict(error, message or "")},
                outcome=outcome,
                response=response,
                usage=usage,
                message=message,
                error_class=None if error is None else type(error).__name__,
                error=error,
            )
            finish = RunFinish(outcome, response, error_data, usage.to_dict(), None)
            self.run_ending = RunEnding.of(outcome, error)
            return self.commit_for(
                state,
                checkpoint,
                step_status=ended_step_status(outcome),
                step_error=error_data,
                finish=finish,
                extra=[terminal],
                consumed_interjections=self._unread_interjections(),
            )

        return transition

    def ending_for(self, error: BaseException, partial_text: str = "") -> Transition:
        """The ending ``error`` calls for: cancelled, partial (a deadline, with the text so far) or failed."""
        if isinstance(error, CancelledError):
            return self.ending("cancelled", error)
        if isinstance(error, DeadlineExceededError):
            return self.ending("partial", error, partial_text)
        error_data = run_error_to_dict(error, self.agent_class)
        self.run.record_diagnostic({"kind": "run_error", "step": self.key, **error_data}, error)
        return self.ending("failed", error)

    def _unread_interjections(self) -> list[int]:
        """Interjections the ending run will never read: its commit marks them consumed.

        The store refuses to finish a run while one is pending (a completion must
        not drop a user's message), so an ending that left them would never commit.
        """
        if not self.engine.interjections_may_be_pending(self.run.id):
            return []
        store, run_id = self.engine.store, self.run.id
        return [seq for seq, _message, _metadata in self.patiently(lambda: store.pending_interjections(run_id))]

    def patiently(self, call: Callable[[], T]) -> T:
        """``call()``, a store call this step makes on its way, through a store outage (Engine.patiently)."""
        return self.engine.patiently(call, f"step {self.key} of run {self.run.id}")

    def completion(
        self,
        state: FrameState,
        checkpoint: AgentCheckpoint,
        result: RunResult,
        messages: list[Any],
        consumed: list[int],
    ) -> StepCommit:
        """The commit that ends the run as completed with ``result``."""
        stored = {"result": result.to_dict()}  # encoded once for both events and the run row
        stop = self.pair("invocation_stop", stored, result=result)
        terminal = self.pair(
            "run_stop", stored, outcome="completed", response=result.text, usage=result.usage, result=result
        )
        finish = RunFinish("completed", result.text, None, result.usage.to_dict(), stored["result"])
        conversation = state.messages + tuple(message for _seq, message in messages)
        if isinstance(checkpoint, DrivenCheckpoint) and checkpoint.session is not None:
            # An assembly's frame holds the history and the caller's message; its turn ends with its answer.
            conversation += (Message("assistant", result.text),)
        session = self.engine.sessions.completion_write(self.run, checkpoint.session, conversation, checkpoint.state)
        return self.commit_for(
            state,
            checkpoint,
            step_result={"stop_reason": result.stop_reason},
            messages=messages,
            finish=finish,
            extra=[stop, terminal],
            consumed_interjections=consumed,
            session=session,  # the run's turn joins its session in this commit (engine/_opening.py)
        )


class StaleStep(Exception):
    """The frame says this step is already done: another execution of it committed first."""


class _StepContext(RunContext):
    """The RunContext of one step.

    Its usage is the checkpoint's (the run's usage so far, read only when
    asked for) plus what the step recorded: its model response and what tools
    and callbacks passed to record_usage. The step's commits add the latter,
    ``added_usage``, to the checkpoint they write (StepScope.add_step_usage).
    """

    def __init__(self, usage_data: dict[str, Any], **options: Any) -> None:
        super().__init__(**options)
        self._usage_data = usage_data

    @property
    def usage(self) -> Usage:
        return Usage.from_dict(self._usage_data) + self.added_usage

    @property
    def added_usage(self) -> Usage:
        """What this step recorded; the shared zero value (NO_USAGE) when it recorded nothing."""
        return super().usage


def run_error_to_dict(error: BaseException, agent_class: Any) -> dict[str, Any]:
    """The stored and diagnostic form of the error that ended a run.

    Its message may quote model or tool content, so it is kept only when the
    agent's ``capture_diagnostics`` is literally True (the default), or when
    it is a LittleGhost Error, whose messages the framework writes. A run
    whose class is unknown here (None) keeps the default.
    """
    capture = agent_class is None or getattr(agent_class, "capture_diagnostics", True) is True
    return error_to_dict(error, include_message=capture or isinstance(error, Error))


def message_rows(state: FrameState, messages: list[Any]) -> list[tuple[int, Any]]:
    """(seq, Message) rows for messages appended after the frame's current conversation."""
    start = state.checkpoint.message_count
    return [(start + i, m) for i, m in enumerate(messages)]


__all__ = ["EndOutcome", "StaleStep", "StepScope", "Transition", "message_rows", "run_error_to_dict"]
