"""Committing a step: its transition becomes one store commit, through version races and outages.

The fourth move of a step (docs/architecture.md, "A step, end to end"). The
transition is applied to the frame's latest state and sent to the store in one
transaction; a lost optimistic-version race (a parallel tool call committed
first) re-runs only the transition, never the model or tool call. Along the
way the commit claims the successor its worker runs next (lg_core.engine._preclaim),
a completed run's turn is written to a session store outside the run store,
and once applied the frame cache, the run's hints and its published events
follow the commit.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lg_core.code_mode.active_sessions import ACTIVE_SESSIONS
from lg_core.engine._driven_checkpoint import DrivenCheckpoint
from lg_core.engine._frame_locks import FrameLocks
from lg_core.engine._frames import FrameState
from lg_core.engine._preclaim import Preclaimed, PreclaimSlot
from lg_core.engine._step_scope import StaleStep, StepScope, Transition
from lg_core.engine.dispatcher import StepRef
from lg_core.engine.run_endings import RunEnding, note_ending
from lg_core.engine.step_kinds import STEP_KINDS
from lg_core.errors import (
    CancelledError,
    DeadlineExceededError,
    Error,
    RunStateError,
    SessionActorError,
    StoreUnavailableError,
)
from lg_core.store import CommitResult, StepCommit

if TYPE_CHECKING:
    from lg_core.engine._run_protocol import EngineRun
    from lg_core.engine.engine import Engine

MAX_COMMIT_ATTEMPTS = 50
log = logging.getLogger("lg_core.engine")


class Committer:
    def __init__(self, engine: Engine[Any], preclaims: PreclaimSlot) -> None:
        self.engine = engine
        self.registry = engine.registry
        self.frames = engine.frames
        self.preclaims = preclaims
        self._frame_locks = FrameLocks()

    def commit(self, scope: StepScope, transition: Transition) -> list[StepRef]:
        """Commit ``transition``; returns the successors to publish (none when the step was stale or lost)."""
        kind = STEP_KINDS.get(scope.kind)
        if kind is None or not kind.has_running_siblings(scope):
            return self._commit_from(scope, transition, scope.frame)
        with self._frame_locks.hold(scope.frame.id):  # lg_core.engine._frame_locks
            state = self._latest_here(scope)
            return [] if state is None else self._commit_from(scope, transition, state)

    def commit_ending(self, scope: StepScope, ending: Transition) -> bool:
        """Commit an ending outside any step (``step_key=None``), while the run still runs; True when applied."""
        state = scope.frame
        run_id = scope.run.id
        for _ in range(MAX_COMMIT_ATTEMPTS):
            commit = replace(ending(state), step_key=None)  # pending interjections are consumed by the ending
            _mark_ending(scope, commit)
            result = self.engine.store.commit(commit)
            if result.applied:
                self.applied(scope, state, commit, result)
                return True
            if result.reason not in ("frame_version_conflict", "interjection_pending", "interjection_already_consumed"):
                return False
            self.registry.interjections.pop(run_id, None)
            state = self.frames.reload(state.id)
        raise RunStateError(f"run {run_id!r} could not be ended after {MAX_COMMIT_ATTEMPTS} conflicting commits")

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
        return self.engine.opening.still_ours(scope, cached)

    def _commit_from(self, scope: StepScope, transition: Transition, state: FrameState) -> list[StepRef]:
        engine = self.engine
        for _ in range(MAX_COMMIT_ATTEMPTS):
            try:
                commit = transition(state)
            except StaleStep:
                return []
            except StoreUnavailableError:
                raise  # not the run's outcome (StepExecutor.perform)
            except (CancelledError, DeadlineExceededError, Exception) as exc:  # noqa: BLE001 - e.g. an after_invocation callback
                transition = scope.ending_for(exc)
                commit = transition(state)
            written = commit.session is not None and not engine.sessions.in_store
            if written:
                failure = self._write_session_elsewhere(scope.run.id, commit)
                if failure is not None:
                    transition = scope.ending_for(failure)
                    continue
            self._claim_successor(scope, commit)
            if commit.finish is not None:  # the store need not read the run's row for the session its end may start
                commit.run_session = (scope.run.invocation.session_id, scope.run.session_actor_id)
                _mark_ending(scope, commit)
            committed_at = time.monotonic()
            now = time.time()
            result = self._store_commit(scope, engine.opening.with_opening(scope, commit), now)
            if result.applied:
                scope.opening = None
                if commit.finish is not None:
                    scope.run._finished_at = now  # what the run row's finished_at now holds
                refs = self.applied(scope, state, commit, result)
                if commit.claimed_successor is not None:
                    self.preclaims.put(self._preclaimed(commit, committed_at, result))
                return refs
            if written and result.reason == "interjection_pending":  # the run goes on: the turn is not done
                self.withdraw_session(scope.run)
            if result.reason == "session_conflict":  # another writer changed the session: fail loudly
                transition = scope.ending_for(self._session_conflict(commit))
                continue
            if result.reason not in ("frame_version_conflict", "interjection_pending", "child_run_ended"):
                return []
            if result.reason == "interjection_pending":
                self.registry.interjections.pop(scope.run.id, None)
            fresh = self.frames.reload(state.id)
            if fresh.checkpoint.history_epoch != scope.frame.checkpoint.history_epoch:
                # The run was retried since this step began (lg_core.replay): the retry runs the
                # step again itself. A late result of the replaced attempt (a local run's call
                # still going in its old process, with no claim to lose) must not move it.
                return []
            state = engine.opening.still_ours(scope, fresh)
        raise RunStateError(f"step {scope.key!r} could not commit after {MAX_COMMIT_ATTEMPTS} version conflicts")

    def _store_commit(self, scope: StepScope, commit: StepCommit, now: float) -> CommitResult:
        """Send ``commit`` to the store, waiting out an outage for up to ``store_outage_patience`` seconds.

        The step's work is done and would be lost with the attempt (a model turn
        paid for again, an at_most_once call ending "outcome unknown"), so a
        database restart or failover is waited out here (lg_core.store.outage_waits).
        Every try sends the same commit with the same ``now``: a try applied
        although its answer was lost is recognised as this commit's. A claimed
        step's commit still applies only while its holder holds it; one that a
        sweep handed to another worker meanwhile is refused as before.
        """
        store = self.engine.store
        return self.engine.patiently(
            lambda: store.commit(commit, now), f"the commit of step {scope.key} of run {scope.run.id}"
        )

    def _claim_successor(self, scope: StepScope, commit: StepCommit) -> None:
        """Have ``commit`` claim the new step the caller runs next (lg_core.engine._preclaim).

        Offered: the steps of the committing frame, whose state the commit leaves
        in this process's cache. A commit that ends the run schedules nothing.
        """
        commit.claimed_successor = None
        if scope.follow is None or commit.finish is not None:
            return
        offered = [StepRef.of(commit.run_id, s) for s in commit.new_steps if s.frame_id == commit.frame_id]
        picked = scope.follow(offered) if offered else None
        if picked is not None:
            commit.claimed_successor, commit.lease_seconds = picked.key, self.engine.lease_seconds

    def _preclaimed(self, commit: StepCommit, committed_at: float, result: CommitResult) -> Preclaimed:
        step = next(step for step in commit.new_steps if step.key == commit.claimed_successor)
        ref = StepRef.of(commit.run_id, step)
        return Preclaimed(ref, step.input, self.frames.cached(step.frame_id), committed_at, result.cancel_requested)

    def applied(self, scope: StepScope, state: FrameState, commit: StepCommit, result: CommitResult) -> list[StepRef]:
        """Bring this process up to an applied commit: frame cache, hints, events; returns the successors."""
        registry = self.registry
        first_seq, cancel_requested = result.first_seq, result.cancel_requested
        known = len(state.messages)  # an opening's messages are in ``state`` already
        appended = tuple(message for seq, message in commit.messages if seq >= known)
        checkpoint = scope.committed_checkpoint(commit.checkpoint)
        if commit.finish is not None:
            scope.run._ended_here = True  # before the terminal event goes out (StepExecutor.execute)
            note_ending(self._ending_of(scope, commit.finish.status))
        self.frames.put(
            FrameState(
                state.id,
                state.run_id,
                state.path,
                state.entrypoint,
                state.version + 1,
                checkpoint,
                state.messages + appended,
            )
        )
        if cancel_requested:
            registry.note_cancel_requested(scope.run.id)
        registry.note_interjections(scope.run.id, result.interjections_pending)
        outgoing = [
            event.with_seq(first_seq + offset) for offset, event in enumerate(scope.outgoing) if event is not None
        ]
        registry.publish_many(scope.run.id, outgoing)
        if commit.finish is not None:
            _close_code_mode_sessions(scope.run.id)
            if scope.frame.checkpoint.subagents is not None:
                self._stop_live_children(scope.run.id)
            if commit.finish.status != "completed":
                self.withdraw_session(scope.run)  # once the run has surely ended: a completed turn stays
            registry.forget(scope.run.id)
            # The parent's step parked on this run, woken by its ending in the same transaction.
            woken = [StepRef(run_id, key, kind, frame_id) for run_id, key, kind, frame_id in result.woken]
            # The run's end may let the next run of its session start (decided in the commit).
            return self.engine.opening.activated(result.activated, here=scope.holder is not None) + woken
        refs = []
        for step in commit.new_steps:
            if scope.holder is None:
                # A local run's successors run here, next: spare them the step read. A claimed
                # step's successors may run in any process, whose look-up reads the input anyway.
                registry.step_inputs[(scope.run.id, step.key)] = step.input
            refs.append(StepRef.of(scope.run.id, step))
        # Steps parked on what this commit recorded (a subagent wait woken by a child turn's end).
        refs.extend(StepRef(run_id, key, kind, frame_id) for run_id, key, kind, frame_id in result.woken)
        return refs

    def _stop_live_children(self, run_id: str) -> None:
        """Cancel the child runs of an ending run that execute in this process (a subagent's turn nested on
        a local step's thread): the commit asked them to stop in the store, which a live run reads only at
        its next commit, while a model call in flight ends at once on its token."""
        engine = self.engine
        for child in engine.store.list_child_runs(run_id):
            live = None if child.finished else engine.live_run(child.id)
            if live is not None:
                live.cancellation_token.cancel("the parent run ended")

    @staticmethod
    def _ending_of(scope: StepScope, status: str) -> RunEnding:
        """The ending ``scope``'s commit wrote: its transition's when that built this one (a failure's
        class and sentence), else the bare status (a completion, an opening's ending)."""
        built = scope.run_ending
        return built if built is not None and built.status == status else RunEnding.of(status, None)

    # -- session writes ----------------------------------------------------------------

    def _write_session_elsewhere(self, run_id: str, commit: StepCommit) -> BaseException | None:
        """Append a completed run's turn to a session store outside the run store, before the commit."""
        if commit.session is None:
            return None
        try:
            self.engine.sessions.write_external(run_id, commit.session)
        except Exception as exc:  # noqa: BLE001 - store failures reach the caller as the run's failure
            return exc
        commit.session = None
        return None

    def withdraw_session(self, run: EngineRun) -> None:
        """Take back a turn ``run`` wrote to an external session store and will not keep.

        Called when a late interjection refused the commit the turn was written for
        (the run goes on), and after a commit that ends the run without completing
        (a turn written before a commit lost in a crash). Never for other refusals:
        another process may have completed the run with that turn. A failure is
        logged, not raised: the turn keeps its ``lg_turn`` record, so a later write
        or withdrawal by the run still finds it.
        """
        try:
            self.engine.sessions.withdraw(run)
        except Error as exc:  # the store's own words (a corrupt file, a conflict): the run already reports them
            log.warning("could not restore session %r after run %s: %s", run.invocation.session_id, run.id, exc)
        except Exception:  # noqa: BLE001 - see above; an unexpected failure keeps its traceback
            log.warning("could not restore session %r after run %s", run.invocation.session_id, run.id, exc_info=True)

    def _session_conflict(self, commit: StepCommit) -> BaseException:
        """Why a commit's session append was refused: the ProtocolError of another writer's
        messages, or the SessionActorError of a session another actor created meanwhile."""
        from lg_core.sessions.base import count_conflict

        sessions = self.engine.sessions
        write = commit.session
        assert write is not None and sessions.store is not None
        try:
            stored = sessions.store.load(write.session_id, actor_id=write.actor_id)
        except SessionActorError as exc:
            return exc
        return count_conflict(
            (write.session_id, write.actor_id), 0 if stored is None else stored.count, write.expected_count
        )


def _mark_ending(scope: StepScope, commit: StepCommit) -> None:
    """What else a run's ending does in its transaction: wake the parent's step parked on it (a child
    run whose parent step is not executing it inline), and ask its own child runs to stop (a run whose
    frame its entrypoint drives, a Graph, or an Agent whose subagents' turns run as child runs)."""
    commit.wakes_parent = scope.run.parent_step is not None and not scope.run.parent_waits_inline
    checkpoint = scope.frame.checkpoint
    commit.cancels_children = isinstance(checkpoint, DrivenCheckpoint) or checkpoint.subagents is not None


def _close_code_mode_sessions(run_id: str) -> None:
    """End the run's code-mode programs held here: the agent call they belong to is over.

    The run's end is committed already, so a program that fails to clean up is
    logged for the operator rather than raised into the commit's bookkeeping.
    """
    try:
        ACTIVE_SESSIONS.close_run(run_id)
    except Exception:  # noqa: BLE001 - logged: the run's outcome is already stored
        log.exception("a code-mode program of run %s did not clean up", run_id)


__all__ = ["MAX_COMMIT_ATTEMPTS", "Committer"]
