"""The engine: starts runs, executes steps, commits transitions, resumes.

One engine serves every dispatcher (DESIGN 4.7): ``execute`` is the five
moves of DESIGN 4.2 for one step: look up, claim (when the dispatcher needs
it), execute outside any transaction, commit in one transaction, and return
the successors for the dispatcher to publish.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from lg_core.callbacks import run_chain
from lg_core.engine.bus import EventBus
from lg_core.engine.checkpoint import AgentCheckpoint
from lg_core.engine.codec import encode_event_data, error_to_dict
from lg_core.engine.dispatcher import StepRef
from lg_core.engine.frames import FrameCache, FrameState
from lg_core.engine.leases import Heartbeat
from lg_core.engine.model_turn import ModelTurn
from lg_core.engine.steps import StepScope, Transition
from lg_core.engine.tool_call import ToolCall, _StaleStep
from lg_core.errors import CancelledError, ConfigurationError, DeadlineExceededError, Error, RunNotFoundError, RunStateError
from lg_core.events import TERMINAL_EVENTS, StreamEvent
from lg_core.identity import current_holder, holder_is_dead
from lg_core.messages import Message
from lg_core.run_context import RunContext
from lg_core.store import CommitResult, NewStep, RunStore, StepCommit
from lg_core.usage import Usage

if TYPE_CHECKING:
    from lg_core.run import Run
    from lg_core.services import Runtime

_MAX_COMMIT_ATTEMPTS = 50
CANCEL_POLL_SECONDS = 1.0


class Engine:
    def __init__(self, runtime: Runtime, store: RunStore, lease_seconds: float = 15.0) -> None:
        self.runtime = runtime
        self.store = store
        self.lease_seconds = lease_seconds
        self.bus = EventBus()
        self.frames = FrameCache(store)
        self._lock = threading.Lock()
        self._live: weakref.WeakValueDictionary[str, Run] = weakref.WeakValueDictionary()
        self._cancel_flags: set[str] = set()
        self._step_inputs: dict[tuple[str, str], dict[str, Any] | None] = {}
        self._resumed: set[tuple[str, str]] = set()
        self._flag_polls: dict[str, float] = {}
        self._recent: OrderedDict[str, Run] = OrderedDict()
        self.sinks: list[Any] = []
        self.heartbeat = Heartbeat(store, lease_seconds)

    # -- run handles -----------------------------------------------------------------

    def attach(self, run: Run) -> None:
        self._live[run.id] = run

    def live_run(self, run_id: str) -> Run | None:
        """The Run object executing ``run_id`` in this process, if any."""
        return self._live.get(run_id)

    def run_handle(self, run_id: str) -> Run | None:
        run = self._live.get(run_id)
        if run is not None:
            return run
        with self._lock:
            cached = self._recent.get(run_id)
            if cached is not None:
                self._recent.move_to_end(run_id)
                return cached
        from lg_core.run import Run

        record = self.store.load_run(run_id)
        if record.finished:
            return None
        run = Run.from_record(record, self.runtime)
        with self._lock:
            self._recent[run_id] = run
            while len(self._recent) > 256:
                self._recent.popitem(last=False)
        return run

    def add_sink(self, sink: Any) -> None:
        """Also publish every event to ``sink`` (e.g. a Redis Stream for other processes)."""
        self.sinks.append(sink)

    def publish(self, run_id: str, event: StreamEvent) -> None:
        self.bus.publish(run_id, event)
        for sink in self.sinks:
            sink.publish(run_id, event)

    def cancel_requested(self, run_id: str) -> bool:
        """Has anyone (any process) asked to cancel? Polls the store at most once a second."""
        if run_id in self._cancel_flags:
            return True
        now = time.monotonic()
        if now - self._flag_polls.get(run_id, 0.0) < CANCEL_POLL_SECONDS:
            return False
        self._flag_polls[run_id] = now
        try:
            _status, cancel, _holder = self.store.run_flags(run_id)
        except RunNotFoundError:
            return False
        if cancel:
            self.note_cancel_requested(run_id)
        return cancel

    def note_cancel_requested(self, run_id: str) -> None:
        with self._lock:
            self._cancel_flags.add(run_id)

    def resolve_model(self, run: Run) -> Any:
        if run._model is None:
            selection = run.entrypoint_class.select_model(run.invocation)
            run._model = self.runtime.resolver.resolve(selection)
        return run._model

    def safe_error_message(self, error: BaseException, run: Run) -> str:
        for hook in self.runtime.hooks:
            message = hook.error_message(error, run)
            if message is not None:
                return str(message)
        if isinstance(error, (Error, CancelledError, DeadlineExceededError)) and str(error):
            return str(error)
        return f"The run failed with an unexpected error ({type(error).__name__})."

    # -- start -------------------------------------------------------------------------

    def start(self, run: Run, *, distributed: bool = False) -> list[StepRef]:
        """Persist a new run and return its first step (none if it ended at once).

        A local run is held by this process (``lg runs resume`` takes it over when
        the process dies); a distributed run is held step by step by workers.
        """
        self.attach(run)
        invocation = run.invocation
        agent_cls = run.entrypoint_class
        context = RunContext(state=invocation.context.copy(), cancellation_token=run.cancellation_token, deadline=invocation.deadline_at)
        frame_id = f"{run.id}/root"
        start_event = StreamEvent.build(
            "invocation_start", run_id=run.id, agent_id=agent_cls.agent_id, input=invocation.message
        )
        events: list[tuple[str, dict[str, Any]]] = [(start_event.type, encode_event_data(start_event.data))]
        deferred: list[StreamEvent] = [start_event]
        messages: list[Message] = []
        ending: tuple[str, BaseException] | None = None
        try:
            messages = self._initial_messages(run, context)
        except CancelledError as exc:
            ending = ("cancelled", exc)
        except Exception as exc:  # noqa: BLE001 - recorded as the run's failure
            ending = ("failed", exc)
        checkpoint = AgentCheckpoint(message_count=len(messages), state=context.state.to_dict())
        row = {
            "id": run.id,
            "entrypoint": run.entrypoint_path,
            "kind": "agent",
            "status": "running",
            "invocation": invocation.to_dict(),
            "session_id": invocation.session_id,
            "actor_id": invocation.actor_id,
            "holder": None if distributed else current_holder(),
            "deadline_at": None if invocation.deadline_at is None else invocation.deadline_at.timestamp(),
        }
        first = NewStep(key="root/turn-0/model", frame_id=frame_id, kind="model")
        if ending is not None:
            row.update(self._ending_fields(run, *ending, events=events, deferred=deferred))
            checkpoint.phase = "done"
        frame = {"id": frame_id, "run_id": run.id, "path": "root", "kind": "agent", "entrypoint": run.entrypoint_path, "version": 0, "checkpoint": checkpoint.to_dict()}
        rows = list(enumerate(messages))
        self.store.create_run(row, frame, rows, events, [] if ending else [first])
        self.frames.put(FrameState(frame_id, run.id, "root", run.entrypoint_path, 0, checkpoint, tuple(messages)))
        for seq, event in enumerate(deferred, start=1):
            self.publish(run.id, event.with_seq(seq))
        if ending is not None:
            return []
        return [StepRef(run.id, first.key, "model", frame_id)]

    def _initial_messages(self, run: Run, context: RunContext) -> list[Message]:
        agent = run.entrypoint_class(run=run, runtime=self.runtime, context=context)
        run_chain(agent, "after_initialize", agent, context=context)
        messages = [*run.invocation.history, run.invocation.message]
        decision = run_chain(agent, "before_invocation", {"messages": messages}, context=context)
        if decision.cancelled:
            raise CancelledError(decision.reason or "a before_invocation callback cancelled the invocation")
        replaced = decision.value["messages"]
        if not isinstance(replaced, (list, tuple)) or not replaced or not all(isinstance(m, Message) for m in replaced):
            raise ConfigurationError("a before_invocation replacement must keep 'messages' a non-empty list of Message")
        return list(replaced)

    def _ending_fields(self, run: Run, outcome: str, error: BaseException, *, events: list[Any], deferred: list[StreamEvent]) -> dict[str, Any]:
        error_data = error_to_dict(error)
        data = {"outcome": outcome, "response": None, "usage": Usage(), "message": self.safe_error_message(error, run), "error_class": type(error).__name__}
        events.append((TERMINAL_EVENTS[outcome], encode_event_data({**data, "error": error_data})))
        deferred.append(StreamEvent.build(TERMINAL_EVENTS[outcome], **data, error=error))
        return {"status": outcome, "error": error_data, "usage": Usage().to_dict()}

    # -- execute -----------------------------------------------------------------------

    def execute(self, ref: StepRef, attempt: int = 1, claimed_by: str | None = None) -> list[StepRef]:
        """Run one step to its commit; returns the successors to publish.

        ``claimed_by`` is the holder that claimed the step (distributed mode): the
        commit then only applies while that holder still holds it.
        """
        run = self.run_handle(ref.run_id)
        if run is None:
            return []
        if (ref.run_id, ref.key) in self._resumed:
            self._resumed.discard((ref.run_id, ref.key))
            attempt = max(attempt, 2)
        scope = StepScope(
            engine=self,
            run=run,
            # A claimed step runs on whichever worker took it: other processes may have
            # moved the frame since this process cached it, so read it fresh (the
            # message tail only). A local run's steps all run here, so the cache is exact.
            frame=self.frames.reload(ref.frame_id) if claimed_by else self.frames.get(ref.frame_id),
            key=ref.key,
            kind=ref.kind,
            attempt=attempt,
            input=self._input_for(ref),
            holder=claimed_by,
        )
        worker = ModelTurn(scope) if ref.kind == "model" else ToolCall(scope)
        transition = self._perform(scope, worker)
        return self._commit(scope, transition)

    def _perform(self, scope: StepScope, worker: ModelTurn | ToolCall) -> Transition:
        try:
            return worker.perform()
        except (CancelledError, DeadlineExceededError, Exception) as exc:  # noqa: BLE001 - becomes the outcome
            return self._ending_for(scope, exc, getattr(worker, "partial_text", ""))

    def _ending_for(self, scope: StepScope, exc: BaseException, partial_text: str = "") -> Transition:
        if isinstance(exc, CancelledError):
            return scope.ending("cancelled", exc)
        if isinstance(exc, DeadlineExceededError):
            return scope.ending("partial", exc, partial_text)
        scope.run.record_diagnostic({"kind": "run_error", "step": scope.key, **error_to_dict(exc)}, exc)
        return scope.ending("failed", exc)

    def _input_for(self, ref: StepRef) -> dict[str, Any] | None:
        if ref.kind != "tool":
            return None
        key = (ref.run_id, ref.key)
        if key in self._step_inputs:
            return self._step_inputs.pop(key)
        step = self.store.load_step(ref.run_id, ref.key)
        if step is None:
            raise RunStateError(f"step {ref.key!r} of run {ref.run_id!r} does not exist")
        return step.input

    def _commit(self, scope: StepScope, transition: Transition) -> list[StepRef]:
        state = scope.frame
        for _ in range(_MAX_COMMIT_ATTEMPTS):
            try:
                commit = transition(state)
            except _StaleStep:
                return []
            except (CancelledError, DeadlineExceededError, Exception) as exc:  # noqa: BLE001 - e.g. an after_invocation callback
                transition = self._ending_for(scope, exc)
                commit = transition(state)
            result = self.store.commit(commit)
            if result.applied:
                return self._applied(scope, state, commit, result)
            if result.reason not in ("frame_version_conflict", "interjection_pending"):
                return []
            state = self.frames.reload(state.id)
        raise RunStateError(f"step {scope.key!r} could not commit after {_MAX_COMMIT_ATTEMPTS} version conflicts")

    def _applied(self, scope: StepScope, state: FrameState, commit: StepCommit, result: CommitResult) -> list[StepRef]:
        first_seq, cancel_requested = result.first_seq, result.cancel_requested
        appended = tuple(message for _seq, message in commit.messages)
        checkpoint = AgentCheckpoint.from_dict(commit.checkpoint)
        self.frames.put(FrameState(state.id, state.run_id, state.path, state.entrypoint, state.version + 1, checkpoint, state.messages + appended))
        if cancel_requested:
            self.note_cancel_requested(scope.run.id)
        for offset, event in enumerate(scope.outgoing):
            if event is not None:
                self.publish(scope.run.id, event.with_seq(first_seq + offset))
        if commit.finish is not None:
            self._forget(scope.run.id)
            return []
        refs = []
        for step in commit.new_steps:
            self._step_inputs[(scope.run.id, step.key)] = step.input
            refs.append(StepRef(scope.run.id, step.key, step.kind, step.frame_id))
        return refs

    def _forget(self, run_id: str) -> None:
        with self._lock:
            self._cancel_flags.discard(run_id)
            self._flag_polls.pop(run_id, None)
            self._recent.pop(run_id, None)
            for key in [k for k in self._step_inputs if k[0] == run_id]:
                del self._step_inputs[key]
        self.frames.forget_run(run_id)

    # -- distributed execution ------------------------------------------------------------

    def execute_claimed(self, run_id: str, key: str) -> tuple[str, list[StepRef]]:
        """The task protocol (DESIGN 4.2): look up, claim, execute, commit.

        Returns what happened (``executed``, ``done``, ``held``, ``missing``) and the
        steps to publish. A step already finished re-announces the run's open
        steps, so a redelivered message never strands its continuation.
        """
        step, run_status, cancel = self.store.load_step_and_run(run_id, key)
        if step is None:
            return "missing", []
        if run_status != "running":
            return "done", []
        if cancel:
            self.note_cancel_requested(run_id)
        if step.status not in ("scheduled", "running"):
            return "done", self.open_steps(run_id, scheduled_only=True)
        attempts = self.claim(run_id, key)
        if attempts is None:
            return "held", []
        self._step_inputs[(run_id, key)] = step.input
        with self.heartbeat.holding():
            refs = self.execute(StepRef(run_id, key, step.kind, step.frame_id), attempt=attempts, claimed_by=current_holder())
        return "executed", refs

    def open_steps(self, run_id: str, *, scheduled_only: bool = False) -> list[StepRef]:
        steps = self.store.load_steps(run_id, open_only=True)
        return [
            StepRef(run_id, s.key, s.kind, s.frame_id)
            for s in steps
            if s.kind in ("model", "tool") and (s.status == "scheduled" or not scheduled_only)
        ]

    # -- claims and resume --------------------------------------------------------------

    def claim_at_most_once(self, scope: StepScope) -> bool:
        """Mark an at_most_once call started before running it; False if it started before."""
        if scope.holder is not None:  # claimed before execution, by the task that runs it
            return scope.attempt == 1
        attempts = self.claim(scope.run.id, scope.key)
        return attempts == 1

    def claim(self, run_id: str, key: str) -> int | None:
        """Claim a step for this process: attempts after the claim, or None if someone live holds it."""
        holder = current_holder()
        attempts = self.store.claim_step(run_id, key, holder, self.lease_seconds)
        if attempts is None:
            step = self.store.load_step(run_id, key)
            if step is not None and step.status == "running" and holder_is_dead(step.holder):
                attempts = self.store.claim_step(run_id, key, holder, self.lease_seconds, stale_holder=step.holder)
        return attempts

    def resume_refs(self, run: Run, previous_holder: str | None) -> list[StepRef]:
        """Take over a stored running run and return its open steps."""
        if not self.store.take_over_run(run.id, current_holder(), previous_holder):
            raise RunStateError(f"run {run.id!r} was taken over by another process or has finished")
        self.attach(run)
        steps = self.store.load_steps(run.id, open_only=True)
        if not steps:
            raise RunStateError(f"run {run.id!r} is running but has no open steps; inspect it with `lg runs show {run.id}`")
        refs = []
        for step in steps:
            self._step_inputs[(run.id, step.key)] = step.input
            self._resumed.add((run.id, step.key))
            refs.append(StepRef(run.id, step.key, step.kind, step.frame_id))
        data = {"holder": current_holder(), "previous_holder": previous_holder, "open_steps": [s.key for s in steps]}
        seq = self.store.append_events(run.id, [("run_resumed", data)])
        self.publish(run.id, StreamEvent.build("run_resumed", **data).with_seq(seq))
        return refs


def entrypoint_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


__all__ = ["Engine", "entrypoint_path"]
