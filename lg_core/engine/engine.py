"""The engine: starts runs, executes steps, commits transitions, resumes.

One engine serves every dispatcher (in-process or Celery, so there is one code
path for transitions). ``Engine`` is the facade the runtime, the run, the
dispatchers, the workers and recovery call; the work is in three parts:

* the run registry (``_run_registry.py``): live runs, rebuilt handles and their
  eviction, event sinks, and the per-run hints this process keeps;
* the step executor (``_step_executor.py``): ``execute`` and
  ``execute_claimed``, the step protocol's look up, claim and execute moves,
  and the release of a failed attempt;
* the committer (``_committer.py``): a transition's commit, through version
  races and outages, with the successor it claims and the session it writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Generic, TypeVar

from lg_core.agent_stream import AgentStreamLink
from lg_core.engine._caller_errors import default_error_message
from lg_core.engine._cancel_watch import CancelWatch
from lg_core.engine._checkpoint import AgentCheckpoint
from lg_core.engine._committer import Committer
from lg_core.engine._driven_checkpoint import DrivenStart
from lg_core.engine._frames import FrameCache, FrameState
from lg_core.engine._opening import OPENING, Activation, Opener
from lg_core.engine._preclaim import Follow, PreclaimSlot
from lg_core.engine._run_protocol import EngineRun, EngineRuntime, EngineSessions, RunT
from lg_core.engine._run_registry import CANCEL_POLL_SECONDS, RunRegistry
from lg_core.engine._step_executor import _UNKNOWN, ClaimedOutcome, StepExecutor
from lg_core.engine._step_scope import EndOutcome, StepScope
from lg_core.engine._turn_keys import MODEL, model_step_key
from lg_core.engine.codec import encode_event_data
from lg_core.engine.dispatcher import StepRef
from lg_core.engine.leases import Heartbeat
from lg_core.engine.recent_dict import DEFAULT_RUN_CACHE_SIZE
from lg_core.engine.step_kinds import STEP_KINDS
from lg_core.errors import ERRORS_INCLUDING_CONTROL_FLOW, InvocationError, RunStateError
from lg_core.events import StreamEvent
from lg_core.execution_state import stored_form
from lg_core.lease_holders import current_holder, holder_is_dead
from lg_core.sessions.run_sessions import RunSessions
from lg_core.store import NewStep, RunRecord, RunStore
from lg_core.store.outage_waits import call_through_outage

T = TypeVar("T")

log = logging.getLogger("lg_core.engine")


class Engine(Generic[RunT]):
    def __init__(
        self,
        runtime: EngineRuntime[RunT],
        store: RunStore,
        lease_seconds: float = 15.0,
        run_cache_size: int = DEFAULT_RUN_CACHE_SIZE,
        max_step_attempts: int = 10,
        store_outage_patience: float = 300.0,
    ) -> None:
        self.runtime = runtime
        self.store = store
        self.lease_seconds = lease_seconds
        self.max_step_attempts = max_step_attempts
        self.store_outage_patience = store_outage_patience
        self.run_cache_size = run_cache_size
        self.frames = FrameCache(store)
        self.heartbeat = Heartbeat(store, lease_seconds, store_outage_patience)
        self.registry: RunRegistry[RunT] = RunRegistry(runtime, store, self.frames, self.heartbeat, run_cache_size)
        self.bus = self.registry.bus
        self.sinks = self.registry.sinks
        self.opening = Opener(self)
        # How runs load and save their sessions; the Runtime builds it from the configuration.
        self.sessions: EngineSessions = getattr(runtime, "sessions", None) or RunSessions(None, store)
        self.cancel_watch = CancelWatch(store, CANCEL_POLL_SECONDS, on_cancel=self.registry.note_cancel_requested)
        preclaims = PreclaimSlot()  # lg_core.engine._preclaim: put by a commit, taken by the next claim
        self.committer = Committer(self, preclaims)
        self.executor = StepExecutor(self, preclaims)

    def close(self) -> None:
        """Stop the threads that use the store (heartbeat, cancel watch) before it closes.

        A thread still running a statement on a SQLite connection that the store's
        close disposes of can crash the process, not just fail the statement.
        Rebuilt runs this process still held close with it.
        """
        self.heartbeat.stop()
        self.cancel_watch.stop()
        self.registry.close()

    # -- run handles (the run registry) ------------------------------------------------

    def attach(self, run: RunT) -> None:
        self.registry.attach(run)

    def abandon(self, run_id: str) -> None:
        """Forget ``run_id`` here after an exception stopped its drive short of its end.

        The drive returns only once none of the run's steps still executes in
        this process, and the run did not end: like a run whose process was
        killed, it stays running in the store and resumable, from this process
        too (``resume`` refuses a run it finds executing here).
        """
        self.registry.detach(run_id)
        self.registry.forget(run_id)

    def live_run(self, run_id: str) -> RunT | None:
        """The Run object executing ``run_id`` in this process, if any."""
        return self.registry.live_run(run_id)

    def run_handle(self, run_id: str, record: RunRecord | None = None) -> RunT | None:
        """The run executing or cached here, else rebuilt from ``record`` (read from the store when None)."""
        return self.registry.run_handle(run_id, record)

    def has_run(self, run_id: str) -> bool:
        """Does ``run_handle`` have the run without reading it? (A claim then need not read its row.)"""
        return self.registry.has_run(run_id)

    def forget_run(self, run_id: str) -> None:
        """Drop what this process remembers about ``run_id`` (retry and fork reopen runs)."""
        self.registry.forget(run_id)

    def add_sink(self, sink: Any) -> None:
        """Also publish every event to ``sink`` (e.g. a Redis Stream for other processes)."""
        self.registry.add_sink(sink)

    def publish(self, run_id: str, event: StreamEvent) -> None:
        self.registry.publish(run_id, event)

    def publish_many(self, run_id: str, events: list[StreamEvent]) -> None:
        """Publish a commit's events in order, each sink taking them in one go."""
        self.registry.publish_many(run_id, events)

    def link_agent_stream(self, child_run_id: str, link: AgentStreamLink) -> None:
        """Publish, while linked, the child's events for its parent as ``agent_stream`` wrappers."""
        self.registry.agent_stream_links.link(child_run_id, link)

    def unlink_agent_stream(self, child_run_id: str) -> None:
        self.registry.agent_stream_links.unlink(child_run_id)

    def cancel_requested(self, run_id: str) -> bool:
        """Has anyone (any process) asked to cancel? Polls the store at most once a second."""
        return self.registry.cancel_requested(run_id)

    def note_cancel_requested(self, run_id: str) -> None:
        self.registry.note_cancel_requested(run_id)

    def interjections_may_be_pending(self, run_id: str) -> bool:
        """False only when this process knows the run has none (so a model turn skips the read)."""
        return self.registry.interjections_may_be_pending(run_id)

    def note_interjections(self, run_id: str, pending: int) -> None:
        self.registry.note_interjections(run_id, pending)

    # -- what steps ask of the runtime ---------------------------------------------------

    def resolve_model(self, run: EngineRun) -> Any:
        if run._model is None:
            agent_cls: Any = run.entrypoint_class  # Run types it as a plain class
            selection = agent_cls.model_selection(run.invocation)
            run._model = self.runtime.resolver.resolve(selection, invocation=run.invocation)
        return run._model

    def safe_error_message(self, error: BaseException, run: EngineRun | None) -> str:
        """The caller-safe message of the error that ends ``run`` (or makes its model call retry): the
        first hook's answer, else the error's class and a fixed sentence (lg_core.engine._caller_errors).

        A hook that raises or returns something other than a str defers, as one
        returning None does, and is logged: the message is asked for while the
        run's ending is written, so its failure would otherwise leave the run
        'running' in the store, with no terminal event.
        """
        for hook in self.runtime.hooks:
            try:
                message = hook.error_message(error, run)
            except ERRORS_INCLUDING_CONTROL_FLOW as exc:  # see above
                log.warning(
                    "%s.error_message raised %s for run %s; using the next hook or the default message",
                    type(hook).__name__,
                    type(exc).__name__,
                    run.id if run is not None else None,
                    exc_info=exc,
                )
                continue
            if isinstance(message, str):
                return message
            if message is not None:  # str() of it could show the caller what the hook meant to hide
                log.warning(
                    "%s.error_message returned %s, not a str or None, for run %s; "
                    "using the next hook or the default message",
                    type(hook).__name__,
                    type(message).__name__,
                    run.id if run is not None else None,
                )
        return default_error_message(error)

    def patiently(self, call: Callable[[], T], subject: str) -> T:
        """``call()``, a store call a step makes on its way, tried again while the store is out of
        reach for up to ``store_outage_patience`` seconds (lg_core.store.outage_waits): the step's work so
        far (a streamed answer) would be lost with its attempt."""
        return call_through_outage(call, subject, self.store_outage_patience)

    # -- start ---------------------------------------------------------------------------

    def start(self, run: RunT, *, distributed: bool = False) -> list[StepRef]:
        """Persist a new run and return its first step (none if it ended at once).

        A local run is held by this process (``lg runs resume`` takes it over when
        the process dies); a distributed run is held step by step by workers.
        """
        invocation = run.invocation
        agent_cls: Any = run.entrypoint_class
        if getattr(agent_cls, "driven_start", None) is not None:
            return self._start_driven(run, agent_cls.driven_start(run), distributed)
        frame_id = f"{run.id}/root"
        start_event = StreamEvent.build(
            "invocation_start", run_id=run.id, agent_id=agent_cls.agent_id, input=invocation.message
        )
        events: list[tuple[str, dict[str, Any]]] = [(start_event.type, encode_event_data(start_event.data))]
        # Stored unopened: the history is loaded when the run's turn on its session
        # comes, which is now unless another run of the session is active (_opening.py).
        checkpoint = AgentCheckpoint(phase=OPENING)
        run.session_actor_id = self.sessions.actor_for(invocation)
        row = {
            "id": run.id,
            "entrypoint": run.entrypoint_path,
            "kind": "agent",
            "status": "running",
            "invocation": invocation.to_dict(),
            "session_id": invocation.session_id,
            "actor_id": run.session_actor_id,
            "holder": None if distributed else current_holder(),
            "deadline_at": None if invocation.deadline_at is None else invocation.deadline_at.timestamp(),
            "execution_state": stored_form(run.execution_state, distributed=distributed),
            **_parent_columns(run),
        }
        first = NewStep(key=model_step_key("root", 0), frame_id=frame_id, kind=MODEL)
        frame = {
            "id": frame_id,
            "run_id": run.id,
            "path": "root",
            "kind": "agent",
            "entrypoint": run.entrypoint_path,
            "version": 0,
            "checkpoint": checkpoint.to_dict(),
        }
        run._created_at = now = time.time()  # the row's created_at, which a parent step reads here
        status = self.store.create_run(row, frame, [], events, [first], serialize=self.sessions.enabled, now=now)
        # Attached once its row is ours: a repeated start under the same run id (refused, or
        # re-attached by Runtime.start_execution) must not replace the Run that executes it.
        self.attach(run)
        state = FrameState(frame_id, run.id, "root", run.entrypoint_path, 0, checkpoint, ())
        self.frames.put(state)
        if status != "pending":  # a pending run may wait long, and others may interject meanwhile
            self.note_interjections(run.id, 0)
        self.publish(run.id, start_event.with_seq(1))
        if status == "pending":
            return self.opening.hold(run, distributed=distributed)
        # Whoever executes the first step opens the frame, in that step's commit (_opening.py).
        return [StepRef(run.id, first.key, MODEL, frame_id)]

    def _start_driven(self, run: RunT, start: DrivenStart, distributed: bool) -> list[StepRef]:
        """Persist a run whose frame its entrypoint class drives (a Graph); returns its first step.

        Like an Agent's run it waits (``pending``) while another run of its session is
        active, and its first step opens its session (engine/_opening.py).
        """
        invocation, frame_id = run.invocation, f"{run.id}/root"
        start_event = StreamEvent.build(
            "invocation_start", run_id=run.id, agent_id=start.entrypoint_id, input=invocation.message
        )
        events: list[tuple[str, dict[str, Any]]] = [(start_event.type, encode_event_data(start_event.data))]
        run.session_actor_id = self.sessions.actor_for(invocation)
        row = {
            "id": run.id,
            "entrypoint": run.entrypoint_path,
            "kind": start.kind,
            "status": "running",
            "invocation": invocation.to_dict(),
            "session_id": invocation.session_id,
            "actor_id": run.session_actor_id,
            "holder": None if distributed else current_holder(),
            "deadline_at": None if invocation.deadline_at is None else invocation.deadline_at.timestamp(),
            "execution_state": stored_form(run.execution_state, distributed=distributed),
            **_parent_columns(run),
        }
        checkpoint = start.checkpoint
        frame = {
            "id": frame_id,
            "run_id": run.id,
            "path": "root",
            "kind": start.kind,
            "entrypoint": run.entrypoint_path,
            "version": 0,
            "checkpoint": checkpoint.to_dict(),
        }
        first = replace(start.first, frame_id=frame_id)
        run._created_at = now = time.time()  # the row's created_at, which a parent step reads here
        status = self.store.create_run(row, frame, [], events, [first], serialize=self.sessions.enabled, now=now)
        self.attach(run)
        self.frames.put(FrameState(frame_id, run.id, "root", run.entrypoint_path, 0, checkpoint, ()))
        if status != "pending":
            self.note_interjections(run.id, 0)
        self.registry.step_inputs[(run.id, first.key)] = first.input
        self.publish(run.id, start_event.with_seq(1))
        if status == "pending":
            return self.opening.hold(run, distributed=distributed)
        return [StepRef.of(run.id, first)]

    def when_active(self, run: RunT, refs: list[StepRef]) -> list[StepRef]:
        """The steps to drive for a local run just started: ``refs``, or, for a run
        stored pending behind another run of its session, its steps once its turn comes."""
        return self.opening.when_active(run, refs)

    def cancel_pending(self, run_id: str, reason: str | None = None) -> bool:
        """End a run that still waits for its session as cancelled; False if it is not pending."""
        return self.opening.cancel_pending(run_id, reason)

    def end_pending_past_deadline(self, run_id: str) -> bool:
        """End a run whose deadline passed while it waited for its session; False if it is not pending."""
        return self.opening.end_past_deadline(run_id)

    def activate_next_pending(self, session_id: str, actor_id: str | None) -> Activation:
        """Recovery: start the next pending run of a session none of whose runs is running.

        For sessions listed by ``store.stalled_sessions()`` (their last run ended
        without a commit that activates the next one). Returns the runs it started
        (none when another process started one first); publish its ``refs``.
        """
        return self.opening.activate_next_pending(session_id, actor_id)

    # -- execute (the step executor) -----------------------------------------------------

    def execute(
        self,
        ref: StepRef,
        attempt: int = 1,
        claimed_by: str | None = None,
        frame: FrameState | None = None,
        step_input: Any = _UNKNOWN,
        body_entered: bool = False,
        follow: Follow | None = None,
    ) -> list[StepRef]:
        """Run one step to its commit; returns the successors to publish.

        ``claimed_by`` is the holder that claimed the step (distributed mode): the
        commit then only applies while that holder still holds it. ``frame`` is
        the frame as the claim read it (``execute_claimed``), else it is read here;
        ``step_input`` likewise the step's input, when the caller has it, and
        ``body_entered`` whether the claim found an earlier attempt's mark that the
        step's at_most_once tool started (lg_core.engine._at_most_once). ``follow``
        (claimed steps only) picks the successor the caller runs next, which the
        commit then claims for it (lg_core.engine._preclaim).
        """
        return self.executor.execute(ref, attempt, claimed_by, frame, step_input, body_entered, follow)

    def execute_claimed(
        self, run_id: str, key: str, *, redelivered: bool = True, follow: Follow | None = None
    ) -> tuple[ClaimedOutcome, list[StepRef]]:
        """The step protocol: look up and claim (one transaction), execute, commit.

        Returns what happened (``executed``, ``done``, ``held``, ``missing``, ``abandoned``,
        ``lost``: another worker took the step over while this one ran it) and the
        steps to publish. A step already finished re-announces the run's open
        steps when its message is ``redelivered`` (the broker's flag: a worker took
        it before and died unacked, maybe between the commit and its publish), so
        that never strands the continuation. A fresh copy (the relay's, a sweep's)
        announces nothing: under a backlog the copy arrives after the step ran,
        while its successors still wait in their queue, and copies of them would
        each do the same at the next turn, a chain that multiplies with fan-out.

        ``follow`` picks the successor the caller runs next on this thread; the
        commit claims it, and that call then starts with no claim of its own
        (lg_core.engine._preclaim).
        """
        return self.executor.execute_claimed(run_id, key, redelivered=redelivered, follow=follow)

    def claim(self, run_id: str, key: str) -> int | None:
        """Claim a step for this process: attempts after the claim, or None if someone live holds it."""
        return self.executor.claim(run_id, key)

    # -- ending, open steps and resume ---------------------------------------------------

    def end_run(self, run_id: str, outcome: EndOutcome, error: BaseException | None) -> bool:
        """End a running run outside any step (recovery: a passed deadline, a cancel nobody acts on).

        The commit is a step ending without a step (``step_key=None``): terminal
        fields, checkpoint and the terminal event are written exactly as a
        step's ending writes them, and only while the run is still running, so
        a racing step or another scheduler ending it first makes this a no-op.
        Interjections still pending are marked consumed: the run is over and
        will never read them. Returns True when this call ended the run.
        """
        if outcome not in ("failed", "partial", "cancelled"):
            raise InvocationError(f"end_run ends a run as failed, partial or cancelled, not {outcome!r}")
        run = self._run_to_end(run_id)
        if run is None:
            return False
        frame_id = f"{run_id}/root"
        scope = StepScope(engine=self, run=run, frame=self.frames.reload(frame_id), key=f"{frame_id}/end", kind="end")
        return self.committer.commit_ending(scope, scope.ending(outcome, error))

    def _run_to_end(self, run_id: str) -> EngineRun | None:
        """The run's handle, or one rebuilt from its record alone when that fails here: a run
        whose workers cannot import its agent, or whose ``Hook.prepare_run`` raises on every
        rebuild, must still be ended (cancel, deadline, out of attempts)."""
        try:
            return self.run_handle(run_id)
        except Exception as exc:  # noqa: BLE001 - the ending matters more than the run's resources
            if not isinstance(exc, RunStateError):
                log.warning("ending run %s without its prepared resources: rebuilding it raised %r", run_id, exc)

            record = self.store.load_run(run_id)
            return None if record.finished else self.runtime.run_to_end(record)

    def open_steps(self, run_id: str, *, unattended_only: bool = False) -> list[StepRef]:
        """The run's open steps of the step-kind table's kinds; ``unattended_only``: those no live process has.

        That is a scheduled step, or a running one whose holder is a dead process on
        this host: the step a task ran after its own (lg_workers.continuation) when
        the process died, which the task's redelivered message must bring back at once.
        """
        steps = self.store.load_steps(run_id, open_only=True)
        return [
            StepRef.of(run_id, s)
            for s in steps
            if s.kind in STEP_KINDS
            and (not unattended_only or s.status == "scheduled" or (s.status == "running" and holder_is_dead(s.holder)))
        ]

    def resume_refs(self, run: RunT, previous_holder: str | None) -> list[StepRef]:
        """Take over a stored running run and return its open steps."""
        if not self.store.take_over_run(run.id, current_holder(), previous_holder):
            raise RunStateError(f"run {run.id!r} was taken over by another process or has finished")
        self.attach(run)
        steps = self.store.load_steps(run.id, open_only=True)
        if not steps:
            raise RunStateError(
                f"run {run.id!r} is running but has no open steps; inspect it with `lg runs show {run.id}`"
            )
        refs = []
        for step in steps:
            self.registry.step_inputs[(run.id, step.key)] = step.input
            self.registry.resumed.add((run.id, step.key))
            refs.append(StepRef.of(run.id, step))
        data = {"holder": current_holder(), "previous_holder": previous_holder, "open_steps": [s.key for s in steps]}
        seq = self.store.append_events(run.id, [("run_resumed", data)])
        self.publish(run.id, StreamEvent.build("run_resumed", **data).with_seq(seq))
        return refs


def _parent_columns(run: EngineRun) -> dict[str, Any]:
    """The run row's link to the step whose child it is (none for a run a caller started)."""
    parent = run.parent_step
    return {} if parent is None else {"parent_run_id": parent[0], "parent_step_key": parent[1]}


def entrypoint_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


__all__ = ["EndOutcome", "Engine", "entrypoint_path"]
