"""The engine: starts runs, executes steps, commits transitions, resumes.

One engine serves every dispatcher (in-process or Celery, so there is one code
path for transitions): ``execute`` is the step protocol's five moves for one
step: look up, claim (when the dispatcher needs it), execute outside any
transaction, commit in one transaction, and return the successors for the
dispatcher to publish.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from lg_core.callbacks import run_chain
from lg_core.engine._at_most_once import StartNotRecorded
from lg_core.engine._caller_errors import caller_error_dict, default_error_message
from lg_core.engine._cancel_watch import CancelWatch
from lg_core.engine._checkpoint import AgentCheckpoint
from lg_core.engine._event_bus import EventBus
from lg_core.engine._executing_runs import executing
from lg_core.engine._frame_locks import FrameLocks
from lg_core.engine._frames import FrameCache, FrameState
from lg_core.engine._model_turn import ModelTurn
from lg_core.engine._opening import OPENING, Activation, Opener
from lg_core.engine._preclaim import Follow, Preclaimed, PreclaimSlot
from lg_core.engine._step_failures import attempts_exhausted, failure_record, retry_delay
from lg_core.engine._step_scope import StepScope, Transition, run_error_to_dict
from lg_core.engine._tool_call import ToolCall, _StaleStep
from lg_core.engine.codec import encode_event_data
from lg_core.engine.dispatcher import StepRef
from lg_core.engine.leases import Heartbeat, StepClaimLost, StepNotClaimed
from lg_core.engine.recent_dict import DEFAULT_RUN_CACHE_SIZE, RecentDict
from lg_core.errors import (
    ERRORS_INCLUDING_CONTROL_FLOW,
    CancelledError,
    ConfigurationError,
    DeadlineExceededError,
    Error,
    InvocationError,
    RunNotFoundError,
    RunStateError,
    SessionActorError,
    StoreUnavailableError,
)
from lg_core.events import TERMINAL_EVENTS, StreamEvent
from lg_core.execution_state import applied, stored_form
from lg_core.identity import current_holder, holder_is_dead
from lg_core.messages import Message
from lg_core.run_context import RunContext
from lg_core.sessions.runs import RunSessions
from lg_core.store import ClaimedStep, CommitResult, NewStep, RunRecord, RunStore, StepCommit
from lg_core.store.database import is_transient
from lg_core.store.outage import call_through_outage
from lg_core.usage import Usage

if TYPE_CHECKING:
    from lg_core.run import Run
    from lg_core.services import Runtime

_MAX_COMMIT_ATTEMPTS = 50
T = TypeVar("T")

log = logging.getLogger("lg_core.engine")
_UNKNOWN: Any = object()  # no input remembered for a step (None is a valid input)
CANCEL_POLL_SECONDS = 1.0


class Engine:
    def __init__(
        self,
        runtime: Runtime,
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
        self.bus = EventBus()
        self.frames = FrameCache(store)
        self._frame_locks = FrameLocks()
        self._lock = threading.Lock()
        self._live: weakref.WeakValueDictionary[str, Run] = weakref.WeakValueDictionary()
        # What this process remembers about runs in flight. Only a run's final commit
        # here clears it, and tools workers and clients never make one, so each is
        # bounded; every entry is a hint whose absence means "ask the store".
        self.run_cache_size = run_cache_size
        self._cancel_flags: RecentDict[str, bool] = RecentDict(run_cache_size)  # missing: poll the flag
        self._step_inputs: RecentDict[tuple[str, str], dict[str, Any] | None] = RecentDict(run_cache_size)  # missing: load the step
        self._resumed: set[tuple[str, str]] = set()
        self._preclaims = PreclaimSlot()  # lg_core.engine._preclaim
        self._flag_polls: RecentDict[str, float] = RecentDict(run_cache_size)  # missing: poll now
        # run -> interjections pending, as of its last commit here; missing: may be pending
        self._interjections: RecentDict[str, int] = RecentDict(run_cache_size)
        self._recent: OrderedDict[str, Run] = OrderedDict()  # the Run cache, up to run_cache_size
        self._retired: list[Run] = []  # dropped from the cache while a step used them; closed by close()
        self.sinks: list[Any] = []
        self.heartbeat = Heartbeat(store, lease_seconds, store_outage_patience)
        self.opening = Opener(self)
        # How runs load and save their sessions; the Runtime builds it from the configuration.
        self.sessions: RunSessions = getattr(runtime, "sessions", None) or RunSessions(None, store)
        self.cancel_watch = CancelWatch(store, CANCEL_POLL_SECONDS, on_cancel=self.note_cancel_requested)

    def close(self) -> None:
        """Stop the threads that use the store (heartbeat, cancel watch) before it closes.

        A thread still running a statement on a SQLite connection that the store's
        close disposes of can crash the process, not just fail the statement.
        """
        self.heartbeat.stop()
        self.cancel_watch.stop()
        with self._lock:
            cached, self._retired = [*self._recent.values(), *self._retired], []
            self._recent.clear()
        for run in cached:  # rebuilt runs this process still held: their resources close with it
            _close_rebuilt(run)

    # -- run handles -----------------------------------------------------------------

    def attach(self, run: Run) -> None:
        self._live[run.id] = run

    def abandon(self, run_id: str) -> None:
        """Forget ``run_id`` here after an exception stopped its drive short of its end.

        The drive returns only once none of the run's steps still executes in
        this process, and the run did not end: like a run whose process was
        killed, it stays running in the store and resumable, from this process
        too (``resume`` refuses a run it finds executing here).
        """
        with self._lock:
            self._live.pop(run_id, None)
        self._forget(run_id)

    def live_run(self, run_id: str) -> Run | None:
        """The Run object executing ``run_id`` in this process, if any."""
        return self._live.get(run_id)

    def run_handle(self, run_id: str, record: RunRecord | None = None) -> Run | None:
        """The run executing or cached here, else rebuilt from ``record`` (read from the store when None)."""
        run = self._live.get(run_id)
        if run is not None:
            return run
        with self._lock:
            cached = self._recent.get(run_id)
            if cached is not None:
                self._recent.move_to_end(run_id)
                return cached
        if record is None:
            record = self.store.load_run(run_id)
        if record.finished:
            return None
        run = self.runtime.restored_run(record)
        with self._lock:
            self._recent[run_id] = run
            evicted = self._evict_idle(keep=run_id)
        for old in evicted:  # not under the lock: closers are application code and may be slow
            _close_rebuilt(old)
        return run

    def has_run(self, run_id: str) -> bool:
        """Does ``run_handle`` have the run without reading it? (A claim then need not read its row.)"""
        return run_id in self._live or run_id in self._recent

    def _evict_idle(self, keep: str) -> list[Run]:
        """Drop the least recently used cached runs beyond ``run_cache_size`` (under ``_lock``).

        A run with a step executing here stays, whatever its age: dropping it
        would close its resources (prepare_run's) under that step. So does
        ``keep``, the run just rebuilt for a step about to execute. The cache
        may so exceed its size while more runs than that are busy at once.
        """
        excess = len(self._recent) - self.run_cache_size
        if excess <= 0:
            return []
        busy = self.heartbeat.executing_runs() | {keep}
        idle = [run_id for run_id in self._recent if run_id not in busy][:excess]
        return [self._recent.pop(run_id) for run_id in idle]

    def add_sink(self, sink: Any) -> None:
        """Also publish every event to ``sink`` (e.g. a Redis Stream for other processes)."""
        self.sinks.append(sink)

    def publish(self, run_id: str, event: StreamEvent) -> None:
        self.bus.publish(run_id, event)
        for sink in self.sinks:
            sink.publish(run_id, event)

    def publish_many(self, run_id: str, events: list[StreamEvent]) -> None:
        """Publish a commit's events in order, each sink taking them in one go.

        A sink with ``publish_many`` (the Redis Stream) sends them in one round
        trip instead of one per event; the in-process bus delivers them one by one.
        """
        if not events:
            return
        for event in events:
            self.bus.publish(run_id, event)
        for sink in self.sinks:
            publish_many = getattr(sink, "publish_many", None)
            if publish_many is not None:
                publish_many(run_id, events)
            else:
                for event in events:
                    sink.publish(run_id, event)

    def cancel_requested(self, run_id: str) -> bool:
        """Has anyone (any process) asked to cancel? Polls the store at most once a second.

        A poll the store cannot answer (an outage, a lock) counts as "no cancel
        seen yet": the next poll, a second later, asks again. Retrying for
        seconds and then raising would fail a run streaming through a database
        restart although nothing is wrong with it.
        """
        if run_id in self._cancel_flags:
            return True
        now = time.monotonic()
        if now - self._flag_polls.get(run_id, 0.0) < CANCEL_POLL_SECONDS:
            return False
        self._flag_polls[run_id] = now
        try:
            _status, cancel, _holder = self.store.run_flags_once(run_id)
        except RunNotFoundError:
            return False
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.debug("the cancel flag of run %s could not be read (%s); asked again in %.0f s", run_id, exc, CANCEL_POLL_SECONDS)
            return False
        if cancel:
            self.note_cancel_requested(run_id)
        return cancel

    def interjections_may_be_pending(self, run_id: str) -> bool:
        """False only when this process knows the run has none (so a model turn skips the read)."""
        return self._interjections.get(run_id, 1) > 0

    def note_interjections(self, run_id: str, pending: int) -> None:
        self._interjections[run_id] = pending

    def note_cancel_requested(self, run_id: str) -> None:
        self._cancel_flags[run_id] = True

    def resolve_model(self, run: Run) -> Any:
        if run._model is None:
            agent_cls: Any = run.entrypoint_class  # Run types it as a plain class
            selection = agent_cls.model_selection(run.invocation)
            run._model = self.runtime.resolver.resolve(selection, invocation=run.invocation)
        return run._model

    def safe_error_message(self, error: BaseException, run: Run) -> str:
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
                log.warning("%s.error_message raised %s for run %s; using the next hook or the default message",
                            type(hook).__name__, type(exc).__name__, run.id if run is not None else None, exc_info=exc)
                continue
            if isinstance(message, str):
                return message
            if message is not None:  # str() of it could show the caller what the hook meant to hide
                log.warning("%s.error_message returned %s, not a str or None, for run %s; using the next hook or the default message",
                            type(hook).__name__, type(message).__name__, run.id if run is not None else None)
        return default_error_message(error)

    # -- start -------------------------------------------------------------------------

    def start(self, run: Run, *, distributed: bool = False) -> list[StepRef]:
        """Persist a new run and return its first step (none if it ended at once).

        A local run is held by this process (``lg runs resume`` takes it over when
        the process dies); a distributed run is held step by step by workers.
        """
        invocation = run.invocation
        agent_cls: Any = run.entrypoint_class
        frame_id = f"{run.id}/root"
        start_event = StreamEvent.build(
            "invocation_start", run_id=run.id, agent_id=agent_cls.agent_id, input=invocation.message
        )
        events: list[tuple[str, dict[str, Any]]] = [(start_event.type, encode_event_data(start_event.data))]
        # Stored unopened: the history is loaded when the run's turn on its session
        # comes, which is now unless another run of the session is active (opening.py).
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
        }
        first = NewStep(key="root/turn-0/model", frame_id=frame_id, kind="model")
        frame = {"id": frame_id, "run_id": run.id, "path": "root", "kind": "agent", "entrypoint": run.entrypoint_path, "version": 0, "checkpoint": checkpoint.to_dict()}
        status = self.store.create_run(row, frame, [], events, [first], serialize=self.sessions.enabled)
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
        # Whoever executes the first step opens the frame, in that step's commit (opening.py).
        return [StepRef(run.id, first.key, "model", frame_id)]

    def when_active(self, run: Run, refs: list[StepRef]) -> list[StepRef]:
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

    def _initial_messages(self, run: Run, context: RunContext, history: Any = None) -> list[Message]:
        # The run-scoped Agent's model is the resolved one in every callback (spec Agent#model).
        agent = run.entrypoint_class(run=run, runtime=self.runtime, model=self.resolve_model(run), context=context)
        run_chain(agent, "after_initialize", agent, context=context)
        messages = [*(run.invocation.history if history is None else history), run.invocation.message]
        decision = run_chain(agent, "before_invocation", {"messages": messages}, context=context)
        if decision.cancelled:
            raise CancelledError(decision.reason or "a before_invocation callback cancelled the invocation")
        replaced = decision.value["messages"]
        if not isinstance(replaced, (list, tuple)) or not replaced or not all(isinstance(m, Message) for m in replaced):
            raise ConfigurationError("a before_invocation replacement must keep 'messages' a non-empty list of Message")
        return list(replaced)

    def _ending_fields(self, run: Run, outcome: str, error: BaseException, *, events: list[Any], deferred: list[StreamEvent]) -> dict[str, Any]:
        error_data = run_error_to_dict(error, None if run is None else run.entrypoint_class)
        message = self.safe_error_message(error, run)
        data = {"outcome": outcome, "response": None, "usage": Usage(), "message": message, "error_class": type(error).__name__}
        stored = encode_event_data({**data, "error": caller_error_dict(error, message)})
        events.append((TERMINAL_EVENTS[outcome], stored))
        deferred.append(StreamEvent.build(TERMINAL_EVENTS[outcome], **data, error=error).with_stored(stored))
        return {"status": outcome, "error": error_data, "usage": Usage().to_dict()}

    # -- execute -----------------------------------------------------------------------

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
        run = self.run_handle(ref.run_id)
        if run is None:
            return []
        with applied(run.execution_state), executing(run.id):  # tools, callbacks and hooks see the run's ExecutionState
            try:
                return self._execute(run, ref, attempt, claimed_by, frame, step_input, body_entered, follow)
            except StepClaimLost as lost:
                if claimed_by is not None:
                    raise  # execute_claimed reports the attempt lost
                # A local call whose run ended (a sibling's commit, recovery) before its
                # at_most_once tool started: nothing of it is left to do.
                log.info("%s", lost)
                return []

    def _execute(
        self, run: Run, ref: StepRef, attempt: int, claimed_by: str | None, frame: FrameState | None, step_input: Any,
        body_entered: bool, follow: Follow | None = None,
    ) -> list[StepRef]:
        if claimed_by is None and run._ended_here:
            # A sibling's commit ended the run (a tool loop, a failing callback) while this
            # step waited for a thread: its tool must not run, nor its events follow the
            # terminal one. (A worker's claim checks the run is running instead.)
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
            frame=frame or (self.frames.reload(ref.frame_id) if claimed_by else self.frames.get(ref.frame_id)),
            key=ref.key,
            kind=ref.kind,
            attempt=attempt,
            input=self._input_for(ref, step_input),
            holder=claimed_by,
            body_entered=body_entered,
            follow=follow if claimed_by else None,
        )
        if scope.frame.checkpoint.phase == OPENING:  # the run's first step after its turn came
            ended = self.opening.open(scope)
            if ended is not None:
                return ended
        worker = ModelTurn(scope) if ref.kind == "model" else ToolCall(scope)
        transition = self._perform(scope, worker)
        return self._commit(scope, transition)

    def _perform(self, scope: StepScope, worker: ModelTurn | ToolCall) -> Transition:
        try:
            return worker.perform()
        except (StartNotRecorded, StoreUnavailableError):
            # Not the run's outcome: the attempt fails and a later one decides (at_most_once), or
            # the store was out of reach past its patience (a worker's step comes back through the
            # scheduler, a local run through resume()).
            raise
        except (CancelledError, DeadlineExceededError, Exception) as exc:  # noqa: BLE001 - becomes the outcome
            return self._ending_for(scope, exc, getattr(worker, "partial_text", ""))

    def _ending_for(self, scope: StepScope, exc: BaseException, partial_text: str = "") -> Transition:
        if isinstance(exc, CancelledError):
            return scope.ending("cancelled", exc)
        if isinstance(exc, DeadlineExceededError):
            return scope.ending("partial", exc, partial_text)
        error_data = run_error_to_dict(exc, scope.agent_class)
        scope.run.record_diagnostic({"kind": "run_error", "step": scope.key, **error_data}, exc)
        return scope.ending("failed", exc)

    def _input_for(self, ref: StepRef, known: Any = _UNKNOWN) -> dict[str, Any] | None:
        """A tool step's input: ``known`` (read with the claim), remembered if this process
        scheduled the step, else read from the store."""
        if ref.kind != "tool":
            return None
        if known is not _UNKNOWN:
            return known
        remembered = self._step_inputs.pop((ref.run_id, ref.key), _UNKNOWN)
        if remembered is not _UNKNOWN:
            return remembered
        step = self.store.load_step(ref.run_id, ref.key)
        if step is None:
            raise RunStateError(f"step {ref.key!r} of run {ref.run_id!r} does not exist")
        return step.input

    def _commit(self, scope: StepScope, transition: Transition) -> list[StepRef]:
        if not _has_running_siblings(scope):
            return self._commit_from(scope, transition, scope.frame)
        with self._frame_locks.hold(scope.frame.id):  # lg_core.engine._frame_locks
            state = self._latest_here(scope)
            return [] if state is None else self._commit_from(scope, transition, state)

    def _latest_here(self, scope: StepScope) -> FrameState | None:
        """The frame as this process's last commit to it left it, when that is newer than the step's read.

        None when a retry rewound the run since the step began (see the conflict
        path of ``_commit_from``): the retry runs the step again itself.
        """
        cached = self.frames.cached(scope.frame.id)
        if cached is None or cached.version <= scope.frame.version:
            return scope.frame
        if cached.checkpoint.history_epoch != scope.frame.checkpoint.history_epoch:
            return None
        return self.opening.still_ours(scope, cached)

    def _commit_from(self, scope: StepScope, transition: Transition, state: FrameState) -> list[StepRef]:
        for _ in range(_MAX_COMMIT_ATTEMPTS):
            try:
                commit = transition(state)
            except _StaleStep:
                return []
            except StoreUnavailableError:
                raise  # not the run's outcome (see _perform)
            except (CancelledError, DeadlineExceededError, Exception) as exc:  # noqa: BLE001 - e.g. an after_invocation callback
                transition = self._ending_for(scope, exc)
                commit = transition(state)
            written = commit.session is not None and not self.sessions.in_store
            if written:
                failure = self._write_session_elsewhere(scope.run.id, commit)
                if failure is not None:
                    transition = self._ending_for(scope, failure)
                    continue
            self._claim_successor(scope, commit)
            if commit.finish is not None:  # the store need not read the run's row for the session its end may start
                commit.run_session = (scope.run.invocation.session_id, scope.run.session_actor_id)
            committed_at = time.monotonic()
            result = self._store_commit(scope, self.opening.with_opening(scope, commit))
            if result.applied:
                scope.opening = None
                refs = self._applied(scope, state, commit, result)
                if commit.claimed_successor is not None:
                    self._preclaims.put(self._preclaimed(commit, committed_at, result))
                return refs
            if written and result.reason == "interjection_pending":  # the run goes on: the turn is not done
                self._withdraw_session(scope.run)
            if result.reason == "session_conflict":  # another writer changed the session: fail loudly
                transition = self._ending_for(scope, self._session_conflict(commit))
                continue
            if result.reason not in ("frame_version_conflict", "interjection_pending"):
                return []
            if result.reason == "interjection_pending":
                self._interjections.pop(scope.run.id, None)
            fresh = self.frames.reload(state.id)
            if fresh.checkpoint.history_epoch != scope.frame.checkpoint.history_epoch:
                # The run was retried since this step began (lg_core.replay): the retry runs the
                # step again itself. A late result of the replaced attempt (a local run's call
                # still going in its old process, with no claim to lose) must not move it.
                return []
            state = self.opening.still_ours(scope, fresh)
        raise RunStateError(f"step {scope.key!r} could not commit after {_MAX_COMMIT_ATTEMPTS} version conflicts")

    def patiently(self, call: Callable[[], T], subject: str) -> T:
        """``call()``, a store call a step makes on its way, tried again while the store is out of
        reach for up to ``store_outage_patience`` seconds (lg_core.store.outage): the step's work so
        far (a streamed answer) would be lost with its attempt."""
        return call_through_outage(call, subject, self.store_outage_patience)

    def _store_commit(self, scope: StepScope, commit: StepCommit) -> CommitResult:
        """Send ``commit`` to the store, waiting out an outage for up to ``store_outage_patience`` seconds.

        The step's work is done and would be lost with the attempt (a model turn
        paid for again, an at_most_once call ending "outcome unknown"), so a
        database restart or failover is waited out here (lg_core.store.outage).
        Every try sends the same commit with the same ``now``: a try applied
        although its answer was lost is recognised as this commit's. A claimed
        step's commit still applies only while its holder holds it; one that a
        sweep handed to another worker meanwhile is refused as before.
        """
        now = time.time()
        return self.patiently(lambda: self.store.commit(commit, now), f"the commit of step {scope.key} of run {scope.run.id}")

    def _claim_successor(self, scope: StepScope, commit: StepCommit) -> None:
        """Have ``commit`` claim the new step the caller runs next (lg_core.engine._preclaim).

        Offered: the steps of the committing frame, whose state the commit leaves
        in this process's cache. A commit that ends the run schedules nothing.
        """
        commit.claimed_successor = None
        if scope.follow is None or commit.finish is not None:
            return
        offered = [StepRef(commit.run_id, s.key, s.kind, s.frame_id) for s in commit.new_steps if s.frame_id == commit.frame_id]
        picked = scope.follow(offered) if offered else None
        if picked is not None:
            commit.claimed_successor, commit.lease_seconds = picked.key, self.lease_seconds

    def _preclaimed(self, commit: StepCommit, committed_at: float, result: CommitResult) -> Preclaimed:
        step = next(step for step in commit.new_steps if step.key == commit.claimed_successor)
        ref = StepRef(commit.run_id, step.key, step.kind, step.frame_id)
        return Preclaimed(ref, step.input, self.frames.cached(step.frame_id), committed_at, result.cancel_requested)

    def _applied(self, scope: StepScope, state: FrameState, commit: StepCommit, result: CommitResult) -> list[StepRef]:
        first_seq, cancel_requested = result.first_seq, result.cancel_requested
        known = len(state.messages)  # an opening's messages are in ``state`` already
        appended = tuple(message for seq, message in commit.messages if seq >= known)
        checkpoint = scope.committed_checkpoint(commit.checkpoint)
        if commit.finish is not None:
            scope.run._ended_here = True  # before the terminal event goes out (see _execute)
        self.frames.put(FrameState(state.id, state.run_id, state.path, state.entrypoint, state.version + 1, checkpoint, state.messages + appended))
        if cancel_requested:
            self.note_cancel_requested(scope.run.id)
        self.note_interjections(scope.run.id, result.interjections_pending)
        outgoing = [event.with_seq(first_seq + offset) for offset, event in enumerate(scope.outgoing) if event is not None]
        self.publish_many(scope.run.id, outgoing)
        if commit.finish is not None:
            if commit.finish.status != "completed":
                self._withdraw_session(scope.run)  # once the run has surely ended: a completed turn stays
            self._forget(scope.run.id)
            # The run's end may let the next run of its session start (decided in the commit).
            return self.opening.activated(result.activated, here=scope.holder is not None)
        refs = []
        for step in commit.new_steps:
            if scope.holder is None:
                # A local run's successors run here, next: spare them the step read. A claimed
                # step's successors may run in any process, whose look-up reads the input anyway.
                self._step_inputs[(scope.run.id, step.key)] = step.input
            refs.append(StepRef(scope.run.id, step.key, step.kind, step.frame_id))
        return refs

    def _write_session_elsewhere(self, run_id: str, commit: StepCommit) -> BaseException | None:
        """Append a completed run's turn to a session store outside the run store, before the commit."""
        if commit.session is None:
            return None
        try:
            self.sessions.write_external(run_id, commit.session)
        except Exception as exc:  # noqa: BLE001 - store failures reach the caller as the run's failure
            return exc
        commit.session = None
        return None

    def _withdraw_session(self, run: Run) -> None:
        """Take back a turn ``run`` wrote to an external session store and will not keep.

        Called when a late interjection refused the commit the turn was written for
        (the run goes on), and after a commit that ends the run without completing
        (a turn written before a commit lost in a crash). Never for other refusals:
        another process may have completed the run with that turn. A failure is
        logged, not raised: the turn keeps its ``lg_turn`` record, so a later write
        or withdrawal by the run still finds it.
        """
        try:
            self.sessions.withdraw(run)
        except Error as exc:  # the store's own words (a corrupt file, a conflict): the run already reports them
            log.warning("could not restore session %r after run %s: %s", run.invocation.session_id, run.id, exc)
        except Exception:  # noqa: BLE001 - see above; an unexpected failure keeps its traceback
            log.warning("could not restore session %r after run %s", run.invocation.session_id, run.id, exc_info=True)

    def _session_conflict(self, commit: StepCommit) -> BaseException:
        """Why a commit's session append was refused: the ProtocolError of another writer's
        messages, or the SessionActorError of a session another actor created meanwhile."""
        from lg_core.sessions.base import count_conflict

        write = commit.session
        assert write is not None and self.sessions.store is not None
        try:
            stored = self.sessions.store.load(write.session_id, actor_id=write.actor_id)
        except SessionActorError as exc:
            return exc
        return count_conflict((write.session_id, write.actor_id), 0 if stored is None else stored.count, write.expected_count)

    def _forget(self, run_id: str) -> None:
        with self._lock:
            self._cancel_flags.pop(run_id, None)
            self._flag_polls.pop(run_id, None)
            self._interjections.pop(run_id, None)
            cached = self._recent.pop(run_id, None)
            self._step_inputs.discard_where(lambda key: key[0] == run_id)
        self.frames.forget_run(run_id)
        if cached is not None:
            _close_rebuilt(cached)

    def forget_run(self, run_id: str) -> None:
        """Drop what this process remembers about ``run_id`` (retry and fork reopen runs)."""
        self._forget(run_id)

    def _clear_stale_cancel(self, run_id: str) -> None:
        """The store says nobody asked to cancel: forget a cancel this process saw earlier.

        A cancelled run can be retried (lg_core.replay); a worker that noticed the
        old cancel must not stop the retried run because of it.
        """
        with self._lock:
            if self._cancel_flags.pop(run_id, None) is not None:
                self._flag_polls.pop(run_id, None)
            # Checked even without a flag: the flags are bounded, so it may have been forgotten.
            cached = self._recent.get(run_id)
            if cached is None or not cached.cancellation_token.cancelled:
                return
            del self._recent[run_id]
            busy = run_id in self.heartbeat.executing_runs()
        if busy:  # a step of the old incarnation still runs with its resources: closed at shutdown
            self._retired.append(cached)
        else:
            _close_rebuilt(cached)

    # -- distributed execution ------------------------------------------------------------

    def execute_claimed(
        self, run_id: str, key: str, *, redelivered: bool = True, follow: Follow | None = None
    ) -> tuple[str, list[StepRef]]:
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
        preclaimed = self._preclaims.take(run_id, key)
        if preclaimed is not None:
            return self._execute_preclaimed(preclaimed, follow)
        claimed_at = time.monotonic()  # the lease runs from no earlier than this (Heartbeat.check)
        try:
            start = self._claim_and_load(run_id, key)
        except StoreUnavailableError as exc:
            raise StepNotClaimed(str(exc), run_id=run_id, key=key) from exc.__cause__
        step = start.step
        if step is None:
            return "missing", []
        self.note_interjections(run_id, start.interjections_pending)
        if start.run_status != "running":
            return "done", []
        if start.cancel_requested:
            self.note_cancel_requested(run_id)
        else:
            self._clear_stale_cancel(run_id)
        # The claim read the cancel flag just now: the step's first check need not poll it again.
        self._flag_polls[run_id] = time.monotonic()
        if start.attempts is None:
            if step.status not in ("scheduled", "running"):
                return "done", self.open_steps(run_id, unattended_only=True) if redelivered else []
            return "held", []
        if start.attempts > self.max_step_attempts:
            self._give_up(run_id, key, start.attempts - 1, step.error)
            return "abandoned", []
        frame_record = start.frame
        assert frame_record is not None
        ref = StepRef(run_id, key, step.kind, step.frame_id)
        return self._execute_held(
            ref, start.attempts, claimed_at, lambda: self.frames.adopt(frame_record, start.messages, start.messages_from),
            step.input, step.body_entered_at is not None, follow, run_record=start.run,
        )

    def _execute_preclaimed(self, preclaimed: Preclaimed, follow: Follow | None) -> tuple[str, list[StepRef]]:
        """A step its scheduling commit claimed for this thread: what the claim would have read, the commit did."""
        ref = preclaimed.ref
        self._flag_polls[ref.run_id] = preclaimed.claimed_at  # the commit read the cancel flag
        if not preclaimed.cancel_requested:
            self._clear_stale_cancel(ref.run_id)
        frame = preclaimed.frame
        return self._execute_held(
            ref, 1, preclaimed.claimed_at, lambda: frame if frame is not None else self.frames.reload(ref.frame_id),
            preclaimed.input, False, follow,
        )

    def _execute_held(
        self, ref: StepRef, attempt: int, claimed_at: float, frame_of: Callable[[], FrameState], step_input: Any,
        body_entered: bool, follow: Follow | None, run_record: RunRecord | None = None,
    ) -> tuple[str, list[StepRef]]:
        """Execute a step this process holds (attempt ``attempt``) to its commit, keeping its lease alive.

        ``run_record`` is the run's row when the claim read it (a run not rebuilt here yet).
        """
        # The lease is kept alive from the claim on: rebuilding the run (its agent's import,
        # every Hook.prepare_run) may outlast a lease, and a sweeper seeing it expire would
        # hand a step its live holder is about to execute to another worker.
        with self.heartbeat.holding(ref.run_id, ref.key, attempt, claimed_at):
            try:
                frame = frame_of()
                run = self.run_handle(ref.run_id, run_record)  # a cancel from another process reaches its tools' context.check()
                with self.cancel_watch.watching(ref.run_id, run.cancellation_token if run else None):
                    refs = self.execute(
                        ref, attempt=attempt, claimed_by=current_holder(), frame=frame, step_input=step_input,
                        body_entered=body_entered, follow=follow,
                    )
            except StepClaimLost as lost:
                log.warning("%s; this attempt (%d) stops", lost, attempt)
                return "lost", []
            except Exception as exc:
                self._release_failed(ref.run_id, ref.key, attempt, exc)
                raise
        return "executed", refs

    def _release_failed(self, run_id: str, key: str, attempt: int, error: Exception) -> None:
        """An attempt raised (not a run outcome: those commit): give the step back for a later attempt."""
        delay = retry_delay(attempt)
        try:
            released = self.store.release_failed_step(run_id, key, current_holder(), failure_record(error, attempt), delay)
        except Exception:  # noqa: BLE001 - e.g. the store is down too: the lease brings the step back
            log.exception("could not give step %s of run %s back after its attempt failed", key, run_id)
            return
        if not released:
            return
        if attempt < self.max_step_attempts:
            then = f"attempt {attempt + 1} of {self.max_step_attempts} in {delay:.0f} s"
        else:
            then = f"that was the last of max_step_attempts ({self.max_step_attempts}): the run fails in {delay:.0f} s"
        log.warning("attempt %d of step %s of run %s raised %s: %s; %s", attempt, key, run_id,
                    type(error).__name__, error, then)

    def _give_up(self, run_id: str, key: str, attempts: int, last_error: dict[str, Any] | None) -> None:
        """End the run of a step that ran out of attempts (the poison-step limit, step_failures)."""
        error = attempts_exhausted(run_id, key, attempts, last_error)
        log.error("%s", error)
        self.end_run(run_id, "failed", error)

    def _claim_and_load(self, run_id: str, key: str) -> ClaimedStep:
        """Claim a step for this process with its frame (claim()'s rules, a dead holder's step included)."""
        holder = current_holder()
        # A run this process has not rebuilt yet (a task's first step, mostly) comes with its row.
        cached = {"known_messages": self.frames.known_messages, "frame_guess": _frame_of(run_id, key),
                  "with_run": not self.has_run(run_id)}
        start = self.store.claim_and_load(run_id, key, holder, self.lease_seconds, **cached)
        step = start.step
        if start.attempts is None and step is not None and step.status == "running" and holder_is_dead(step.holder):
            start = self.store.claim_and_load(run_id, key, holder, self.lease_seconds, stale_holder=step.holder, **cached)
        return start

    def end_run(self, run_id: str, outcome: str, error: BaseException | None) -> bool:
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
        ending = scope.ending(outcome, error)
        state = scope.frame
        for _ in range(_MAX_COMMIT_ATTEMPTS):
            commit = replace(ending(state), step_key=None)  # pending interjections are consumed by the ending
            result = self.store.commit(commit)
            if result.applied:
                self._applied(scope, state, commit, result)
                return True
            if result.reason not in ("frame_version_conflict", "interjection_pending", "interjection_already_consumed"):
                return False
            self._interjections.pop(run_id, None)
            state = self.frames.reload(frame_id)
        raise RunStateError(f"run {run_id!r} could not be ended after {_MAX_COMMIT_ATTEMPTS} conflicting commits")

    def _run_to_end(self, run_id: str) -> Run | None:
        """The run's handle, or one rebuilt from its record alone when that fails here: a run
        whose workers cannot import its agent, or whose ``Hook.prepare_run`` raises on every
        rebuild, must still be ended (cancel, deadline, out of attempts)."""
        try:
            return self.run_handle(run_id)
        except Exception as exc:  # noqa: BLE001 - the ending matters more than the run's resources
            from lg_core.run import Run

            if not isinstance(exc, RunStateError):
                log.warning("ending run %s without its prepared resources: rebuilding it raised %r", run_id, exc)

            record = self.store.load_run(run_id)
            return None if record.finished else Run.from_record(record, self.runtime, to_end=True)

    def open_steps(self, run_id: str, *, unattended_only: bool = False) -> list[StepRef]:
        """The run's open model and tool steps; ``unattended_only``: those no live process has.

        That is a scheduled step, or a running one whose holder is a dead process on
        this host: the step a task ran after its own (lg_workers.continuation) when
        the process died, which the task's redelivered message must bring back at once.
        """
        steps = self.store.load_steps(run_id, open_only=True)
        return [
            StepRef(run_id, s.key, s.kind, s.frame_id)
            for s in steps
            if s.kind in ("model", "tool")
            and (not unattended_only or s.status == "scheduled" or (s.status == "running" and holder_is_dead(s.holder)))
        ]

    # -- claims and resume --------------------------------------------------------------

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


def _close_rebuilt(run: Run) -> None:
    """Close a rebuilt run's resources as its run ends here; a failure is logged, not raised,
    since the run's outcome is already committed and nobody waits on this process for it."""
    try:
        run.close()
    except Exception as exc:  # noqa: BLE001 - the committed outcome stands
        log.warning("closing the resources of run %s failed: %r", run.id, exc)


def entrypoint_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _frame_of(run_id: str, key: str) -> str:
    """The frame a step most likely belongs to, for its claim to read only the messages not cached.

    A step's key starts with its frame's path (``root/turn-3/model``) and a frame's id
    is the run id and that path (``{run_id}/root``). Only a guess: when the step's
    frame turns out to be another, the claim reads that frame's whole history.
    """
    path, _turn, _rest = key.partition("/turn-")
    return f"{run_id}/{path}"


def _has_running_siblings(scope: StepScope) -> bool:
    """Is ``scope`` a tool call of a turn whose other calls may be committing now (parallel, not exclusive)?"""
    return scope.kind == "tool" and sum(1 for p in scope.frame.checkpoint.pending if p.status == "scheduled") > 1


__all__ = ["Engine", "entrypoint_path"]
