"""Opening a run's conversation: at once, or when its turn on the session comes.

A run is stored with its root frame *unopened* (checkpoint phase
``opening``, no messages) and its first model step. Opening the frame loads
the session (history and state, ``lg_core.sessions.run_sessions``) and runs the
agent's ``after_initialize`` and ``before_invocation`` callbacks; the initial
messages are written by the first step's own commit, together with what the
step produced (``StepScope.opening``), so opening costs no commit of its own.
It happens in whichever process executes the run's first step:

* the process that started a local run, or the worker that claims a
  distributed run's first step, when no other run of the session is active
  (``start`` and ``start_execution`` make a single commit);
* otherwise when the run's turn comes. Runs sharing a session (session id and
  actor) never interleave: a run started while another one is running or
  waiting is stored ``pending`` with its first step held back, and the commit
  that ends the run before it makes it ``running`` and releases that step
  (decided in the database, ``lg_core.store.session_transactions``). Whoever executes the
  step (a worker, or the process waiting in ``ask()``) opens the frame first,
  so the history includes every turn before it.

Opening is idempotent: the first step's commit expects the unopened frame's
version, so of two openers (a crash and a redelivery) one wins; the other's
commit is replayed on the frame the winner wrote, as for any version
conflict. A run whose opening fails or is cancelled by a callback ends right
there, exactly as it would have at start.

An assembly's run (a Graph, Swarm or Workflow: a frame its entrypoint class
drives) is serialized on its session the same way and opened by its first step
too (:meth:`Opener.open_driven`): the session's history and the caller's
message become the frame's messages, whose history its entrypoint class hands to
its first participants (lg_core.engine.driven_frames), and its completion
appends the caller's message and the assembly's answer as the run's turn.
There are no Agent callbacks to run; ``Hook.session_history`` applies.

Recovery: a pending run waits for a commit of the run before it. If that run
ended some other way (a scheduler ended it, an old process ended it without
this code), ``RunStore.stalled_sessions()`` lists the session and
``Engine.activate_next_pending(session_id, actor_id)`` starts the next run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lg_core.callbacks import run_chain
from lg_core.engine._caller_errors import caller_error_dict
from lg_core.engine._checkpoint import AgentCheckpoint, checked_state
from lg_core.engine._driven_checkpoint import DrivenCheckpoint
from lg_core.engine._executing_runs import executing_runs
from lg_core.engine._frames import FrameState
from lg_core.engine._step_scope import run_error_to_dict
from lg_core.engine.codec import encode_event_data
from lg_core.engine.dispatcher import StepRef
from lg_core.errors import (
    CancelledError,
    ConfigurationError,
    DeadlineExceededError,
    RunStateError,
    StoreUnavailableError,
)
from lg_core.events import TERMINAL_EVENTS, StreamEvent
from lg_core.lease_holders import current_holder, holder_is_dead
from lg_core.messages import Message
from lg_core.run_context import RunContext
from lg_core.store import RunFinish, StepCommit
from lg_core.store.records import ActivatedRun, ended_step_status
from lg_core.usage import Usage

if TYPE_CHECKING:
    from lg_core.engine._run_protocol import EngineRun
    from lg_core.engine._step_scope import EndOutcome, StepScope, Transition
    from lg_core.engine.engine import Engine

OPENING = "opening"
log = logging.getLogger("lg_core.opening")


@dataclass(frozen=True)
class Activation:
    """What recovery's start of a session's next pending run did.

    ``runs``: the runs it made ``running``: none when a run of the session was
    running by then (another scheduler, or a commit, started it first) or the
    pending run ended meanwhile. ``refs``: their distributed steps, for the caller
    to publish (a local run is woken here or found by polling, so it has none).
    """

    runs: tuple[str, ...]
    refs: list[StepRef]


WAIT_POLL_SECONDS = 0.5  # how often a waiting local run checks the store (activation here wakes it at once)
STUCK_CHECK_SECONDS = 10.0  # how often it checks whether the run it waits for was left by a dead process


class Opener:
    """Opens frames and hands activated runs to whoever drives them."""

    def __init__(self, engine: Engine[Any]) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._pending: set[str] = set()  # local runs this process stored pending and will drive
        self._wakeups: dict[str, threading.Event] = {}

    # -- opening ------------------------------------------------------------------------------

    def open(self, scope: StepScope) -> list[StepRef] | None:
        """Open ``scope.frame`` in memory: None when the step can go on, else what the run's ending returned.

        The opened frame keeps the stored (unopened) version and becomes
        ``scope.opening``: the step's commit writes its messages too.
        """
        engine, run, frame = self.engine, scope.run, scope.frame
        try:
            messages, context, session = self._prepare(run)
            state = checked_state(context.state)  # an opening callback may have put a non-JSON value in it
        except CancelledError as exc:
            return engine.committer.commit(scope, self._ending(scope, "cancelled", exc))
        except DeadlineExceededError as exc:  # a BaseException too: an opening callback's context.check()
            return engine.committer.commit(scope, self._ending(scope, "partial", exc))
        except StoreUnavailableError:
            raise  # loading the session found the store out of reach: the attempt fails, not the run
        except Exception as exc:  # noqa: BLE001 - recorded as the run's failure, as at start
            return engine.committer.commit(scope, self._ending(scope, "failed", exc))
        # The epoch stays: a retry from the start set it, and it tells a step begun before that retry
        # (Committer._commit_from).
        checkpoint = AgentCheckpoint(
            message_count=len(messages), state=state, session=session, history_epoch=frame.checkpoint.history_epoch
        )
        if context.usage.total_tokens:  # recorded by an opening callback
            checkpoint.usage = context.usage.to_dict()
        scope.frame = FrameState(
            frame.id, frame.run_id, frame.path, frame.entrypoint, frame.version, checkpoint, tuple(messages)
        )
        scope.opening = scope.frame
        return None

    def needs_driven_opening(self, checkpoint: AgentCheckpoint) -> bool:
        """A driven frame whose run has a session it has not loaded yet (its first step is executing)."""
        return self.engine.sessions.enabled and _driven_unopened(checkpoint) and checkpoint.phase != "done"

    def open_driven(self, scope: StepScope) -> list[StepRef] | None:
        """Open a driven frame in memory, as :meth:`open` opens an Agent's: None when the step can go on.

        Its messages are the history its session gave (or the invocation's, for a new
        session) and the caller's message; its working state is the session's state
        with the invocation's context over it, which its completion stores back.
        """
        engine, run, frame = self.engine, scope.run, scope.frame
        try:
            opening = engine.sessions.open(run, engine.runtime.hooks)
            state = checked_state(opening.state)
        except StoreUnavailableError:
            raise  # loading the session found the store out of reach: the attempt fails, not the run
        except Exception as exc:  # noqa: BLE001 - e.g. another actor's session: the run's failure, as at start
            return engine.committer.commit(scope, self._ending(scope, "failed", exc))
        messages = (*opening.history, run.invocation.message)
        checkpoint = frame.checkpoint.copy()
        checkpoint.state = state
        checkpoint.message_count = len(messages)
        checkpoint.session = engine.sessions.checkpoint_info(opening, messages, run.invocation.message)
        scope.frame = FrameState(
            frame.id, frame.run_id, frame.path, frame.entrypoint, frame.version, checkpoint, messages
        )
        scope.opening = scope.frame
        return None

    @staticmethod
    def with_opening(scope: StepScope, commit: StepCommit) -> StepCommit:
        """``commit`` with the messages of the frame opened by ``scope`` in front, if not written yet."""
        if scope.opening is not None:
            commit.messages = [*enumerate(scope.opening.messages), *commit.messages]
        return commit

    @staticmethod
    def still_ours(scope: StepScope, fresh: FrameState) -> FrameState:
        """After a conflict: the frame ``scope`` opened if nobody wrote the frame since, else ``fresh``."""
        opened = scope.opening
        if opened is None:
            return fresh
        if fresh.version == opened.version and (
            fresh.checkpoint.phase == OPENING or _driven_unopened(fresh.checkpoint)
        ):
            return opened
        scope.opening = None  # another process opened it (or ended the run): its messages stand
        return fresh

    def _prepare(self, run: EngineRun) -> tuple[list[Message], RunContext, dict[str, int] | None]:
        engine = self.engine
        opening = engine.sessions.open(run, engine.runtime.hooks)
        context = RunContext(
            state=opening.state, cancellation_token=run.cancellation_token, deadline=run.invocation.deadline_at
        )
        messages = self._initial_messages(run, context, opening.history)
        session = engine.sessions.checkpoint_info(opening, messages, run.invocation.message)
        return messages, context, session

    def _initial_messages(self, run: EngineRun, context: RunContext, history: Any = None) -> list[Message]:
        """The run's first messages, after its agent's ``after_initialize`` and ``before_invocation`` callbacks."""
        engine = self.engine
        # The run-scoped Agent's model is the resolved one in every callback (spec Agent#model).
        agent = run.entrypoint_class(run=run, runtime=engine.runtime, model=engine.resolve_model(run), context=context)
        run_chain(agent, "after_initialize", agent, context=context)
        messages = [*(run.invocation.history if history is None else history), run.invocation.message]
        decision = run_chain(agent, "before_invocation", {"messages": messages}, context=context)
        if decision.cancelled:
            raise CancelledError(decision.reason or "a before_invocation callback cancelled the invocation")
        replaced = decision.value["messages"]
        if not isinstance(replaced, (list, tuple)) or not replaced or not all(isinstance(m, Message) for m in replaced):
            raise ConfigurationError("a before_invocation replacement must keep 'messages' a non-empty list of Message")
        return list(replaced)

    def _ending_fields(
        self,
        run: EngineRun | None,
        outcome: EndOutcome,
        error: BaseException,
        *,
        events: list[Any],
        deferred: list[StreamEvent],
    ) -> dict[str, Any]:
        """The terminal fields of a run ended before its first step: its terminal event goes to ``events``
        (stored) and ``deferred`` (published once stored)."""
        error_data = run_error_to_dict(error, None if run is None else run.entrypoint_class)
        message = self.engine.safe_error_message(error, run)
        data = {
            "outcome": outcome,
            "response": None,
            "usage": Usage(),
            "message": message,
            "error_class": type(error).__name__,
        }
        stored = encode_event_data({**data, "error": caller_error_dict(error, message)})
        events.append((TERMINAL_EVENTS[outcome], stored))
        deferred.append(StreamEvent.build(TERMINAL_EVENTS[outcome], **data, error=error).with_stored(stored))
        return {"status": outcome, "error": error_data, "usage": Usage().to_dict()}

    def _ending(self, scope: StepScope, outcome: EndOutcome, error: BaseException) -> Transition:
        """End the run at its opening, with the same terminal fields a start-time failure had."""
        run = scope.run

        def transition(state: FrameState) -> StepCommit:
            events: list[Any] = []
            deferred: list[Any] = []
            fields = self._ending_fields(run, outcome, error, events=events, deferred=deferred)
            scope.outgoing = deferred
            checkpoint = state.checkpoint.copy()
            checkpoint.phase = "done"
            return StepCommit(
                run_id=run.id,
                frame_id=state.id,
                expected_version=state.version,
                checkpoint=checkpoint.to_dict(),
                step_key=scope.key,
                step_status=ended_step_status(outcome),
                step_error=fields["error"],
                holder=scope.holder,
                events=events,
                finish=RunFinish(outcome, None, fields["error"], fields["usage"], None),
            )

        return transition

    # -- waiting for the session's turn -------------------------------------------------------------

    def hold(self, run: EngineRun, *, distributed: bool) -> list[StepRef]:
        """``run`` was stored pending. A local run is driven by this process once its turn comes."""
        if not distributed:
            with self._lock:
                self._pending.add(run.id)
        return []

    def when_active(self, run: EngineRun, refs: list[StepRef]) -> list[StepRef]:
        """``refs`` for a run that started at once; for a pending local run, block until its turn.

        Returns the run's open steps once it runs, or nothing if it ended while
        waiting (cancelled). Cancelling the run's token while it waits ends it.
        """
        with self._lock:
            if run.id not in self._pending:
                return refs
            wakeup = self._wakeups.setdefault(run.id, threading.Event())
        try:
            return self._await_turn(run, wakeup)
        finally:
            with self._lock:
                self._pending.discard(run.id)
                self._wakeups.pop(run.id, None)

    def _await_turn(self, run: EngineRun, wakeup: threading.Event) -> list[StepRef]:
        warned: set[str] = set()
        next_stuck_check = time.monotonic()  # at once, then every STUCK_CHECK_SECONDS (a query and a /proc read)
        while True:
            status = self.engine.store.run_flags(run.id)[0]
            if status == "running":
                return self.engine.open_steps(run.id)
            if status != "pending":
                run.refresh()
                return []
            if run.cancellation_token.cancelled:
                self.cancel_pending(run.id, run.cancellation_token.reason)
                continue
            deadline = run.invocation.deadline_at
            remaining = None if deadline is None else deadline.timestamp() - time.time()
            if remaining is not None and remaining <= 0:
                self.end_past_deadline(run.id)
                continue
            if time.monotonic() >= next_stuck_check:
                self._check_runner(run, warned)
                next_stuck_check = time.monotonic() + STUCK_CHECK_SECONDS
            wakeup.wait(WAIT_POLL_SECONDS if remaining is None else min(WAIT_POLL_SECONDS, remaining))
            wakeup.clear()

    def _check_runner(self, run: EngineRun, warned: set[str]) -> None:
        """Look at the run that ``run`` waits for, when nothing may ever end it.

        The runner started ``run`` from one of its tools (or callbacks) on this
        thread: it waits for ``run``, so ``run`` fails at once instead. The
        runner was left running by a process that is gone, or stopped in this
        one by an exception (Ctrl-C in a tool): nothing executes it until
        someone resumes or cancels it, so say so, once, rather than wait in
        silence (a deadline still ends the wait).
        """
        session_id = run.invocation.session_id
        runner = self.engine.store.session_runner(session_id, run.session_actor_id)
        if runner is None or runner[1] is None or runner[0] in warned:
            return
        runner_id, holder = runner
        if runner_id in executing_runs():
            error = RunStateError(
                f"run {run.id} cannot wait for session {session_id!r}: the run holding it, {runner_id}, "
                "started this one from a tool or callback and waits for it, so neither could end; "
                "give this agent call its own session_id, or none"
            )
            self.end_pending(run.id, "failed", error)
            return
        if holder_is_dead(holder):
            why, resume = "was left by a process that is gone", f"lg runs resume {runner_id}"
        elif holder == current_holder() and self.engine.live_run(runner_id) is None:
            why = "was stopped in this process by an exception (e.g. KeyboardInterrupt)"
            resume = f"lg_core.resume({runner_id!r}) in this process"
        else:
            return
        warned.add(runner_id)
        log.warning(
            "run %s waits for session %r, whose running run %s %s; "
            "resume that run (%s) or cancel it, and this one starts",
            run.id,
            session_id,
            runner_id,
            why,
            resume,
        )

    def _wake(self, run_id: str) -> None:
        with self._lock:
            wakeup = self._wakeups.get(run_id)
        if wakeup is not None:
            wakeup.set()

    def cancel_pending(self, run_id: str, reason: str | None = None) -> bool:
        """End a run still waiting for its session as cancelled; False if it is not pending."""
        error = CancelledError(reason or "The run was cancelled while it waited for its session.")
        return self.end_pending(run_id, "cancelled", error)

    def end_past_deadline(self, run_id: str) -> bool:
        """End a run whose deadline passed while it waited for its session as partial; False if not pending."""
        error = DeadlineExceededError("the deadline passed while the run waited for its session")
        return self.end_pending(run_id, "partial", error)

    def end_pending(self, run_id: str, outcome: EndOutcome, error: BaseException) -> bool:
        """End a run still waiting for its session (cancelled, or partial when its deadline
        passed); False if it is not pending any more."""
        engine = self.engine
        try:
            run = engine.run_handle(run_id)
        except Exception:  # noqa: BLE001 - its class may not import here; hooks then see no run
            run = None
        events: list[Any] = []
        deferred: list[Any] = []
        fields = self._ending_fields(run, outcome, error, events=events, deferred=deferred)
        first = engine.store.end_pending_run(run_id, outcome, fields["error"], fields["usage"], events)
        if first is None:
            return False
        for offset, event in enumerate(deferred):
            engine.publish(run_id, event.with_seq(first + offset))
        self._wake(run_id)
        return True

    # -- activation ------------------------------------------------------------------------------

    def activated(self, activated: Sequence[ActivatedRun], *, here: bool) -> list[StepRef]:
        """Hand runs a commit activated to their drivers; returns the steps to publish from here.

        A local run (it has a holder) is driven by its own process: wake it if it
        waits in this one (another process notices by polling). A distributed
        run's first steps are returned when the caller publishes successors (a
        worker), and otherwise sent through this runtime's backend; without one
        the outbox relay sends them after ``relay_grace``.
        """
        refs: list[StepRef] = []
        for item in activated:
            if item.holder is not None:
                self._wake(item.run_id)
                continue
            refs.extend(StepRef(item.run_id, key, kind, frame_id) for key, kind, frame_id in item.steps)
        if refs and not here:
            self._publish_elsewhere(refs)
            return []
        return refs

    def _publish_elsewhere(self, refs: list[StepRef]) -> None:
        try:
            publish = getattr(self.engine.runtime.backend, "publish", None)
            if publish is not None:
                publish(refs)
        except Exception:  # noqa: BLE001 - the steps are in the outbox; the relay sends them
            pass

    def activate_next_pending(self, session_id: str, actor_id: str | None) -> Activation:
        """Recovery: start the session's next pending run if none of its runs is running.

        Returns the runs started and the distributed steps to publish (the caller
        publishes them, like a task publishes successors); a local run is woken or
        found by polling.
        """
        started = self.engine.store.activate_next_pending(session_id, actor_id)
        return Activation(tuple(item.run_id for item in started), self.activated(started, here=True))


def _driven_unopened(checkpoint: AgentCheckpoint) -> bool:
    """A driven frame not opened yet: no session read, no messages (an opened one holds at least the caller's)."""
    return isinstance(checkpoint, DrivenCheckpoint) and checkpoint.session is None and checkpoint.message_count == 0


__all__ = ["OPENING", "Activation", "Opener", "WAIT_POLL_SECONDS"]
