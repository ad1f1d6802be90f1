"""Executing a step: look it up, claim it, run its body outside any transaction, hand it to the committer.

Moves one to three of a step (docs/architecture.md, "A step, end to end"),
for every dispatcher: ``execute`` runs a step this process was handed (the
local dispatcher's, or one claimed below), ``execute_claimed`` is the
distributed protocol, claiming the step and reading its frame in one
transaction (or taking the claim a predecessor's commit made for this thread,
lg_core.engine._preclaim). The step's kind (lg_core.engine.step_kinds) says
which body executes it. An attempt that raises, rather than ending the run,
gives its step back for a later attempt; a step out of attempts ends its run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, cast

from lg_core.engine._at_most_once import StartNotRecorded
from lg_core.engine._executing_runs import executing
from lg_core.engine._frames import FrameState
from lg_core.engine._opening import OPENING
from lg_core.engine._preclaim import Follow, Preclaimed, PreclaimSlot
from lg_core.engine._step_failures import attempts_exhausted, failure_record, retry_delay
from lg_core.engine._step_kind import StepBody
from lg_core.engine._step_scope import StepScope, Transition
from lg_core.engine.dispatcher import StepRef
from lg_core.engine.leases import StepClaimLost, StepNotClaimed
from lg_core.engine.run_endings import take_ending
from lg_core.engine.step_kinds import STEP_KINDS
from lg_core.errors import (
    CancelledError,
    DeadlineExceededError,
    RunStateError,
    StoreUnavailableError,
)
from lg_core.execution_state import applied
from lg_core.lease_holders import current_holder, holder_is_dead
from lg_core.store import ClaimedStep, RunRecord

if TYPE_CHECKING:
    from lg_core.engine._run_protocol import EngineRun
    from lg_core.engine.engine import Engine

log = logging.getLogger("lg_core.engine")
_UNKNOWN: Any = object()  # no input remembered for a step (None is a valid input)

# What ``execute_claimed`` did with its step: ran it to its commit, found it finished, left it to
# its live holder, found no such step, ended its run out of attempts, or lost it to another worker.
ClaimedOutcome = Literal["executed", "done", "held", "missing", "abandoned", "lost"]


class StepExecutor:
    def __init__(self, engine: Engine[Any], preclaims: PreclaimSlot) -> None:
        self.engine = engine
        self.registry = engine.registry
        self.store = engine.store
        self.preclaims = preclaims

    # -- a step handed to this process ---------------------------------------------------

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
        """Run one step to its commit; returns the successors to publish (Engine.execute)."""
        run = self.registry.run_handle(ref.run_id)
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
        self,
        run: EngineRun,
        ref: StepRef,
        attempt: int,
        claimed_by: str | None,
        frame: FrameState | None,
        step_input: Any,
        body_entered: bool,
        follow: Follow | None = None,
    ) -> list[StepRef]:
        if claimed_by is None and run._ended_here:
            # A sibling's commit ended the run (a tool loop, a failing callback) while this
            # step waited for a thread: its tool must not run, nor its events follow the
            # terminal one. (A worker's claim checks the run is running instead.)
            return []
        kind = STEP_KINDS.get(ref.kind)
        if kind is None:
            raise RunStateError(
                f"step {ref.key!r} of run {ref.run_id!r} is of kind {ref.kind!r}, which the engine does not execute"
            )
        resumed = self.registry.resumed
        if (ref.run_id, ref.key) in resumed:
            resumed.discard((ref.run_id, ref.key))
            attempt = max(attempt, 2)
        frames = self.engine.frames
        scope = StepScope(
            engine=self.engine,
            run=run,
            # A claimed step runs on whichever worker took it: other processes may have
            # moved the frame since this process cached it, so read it fresh (the
            # message tail only). A local run's steps all run here, so the cache is exact.
            frame=frame or (frames.reload(ref.frame_id) if claimed_by else frames.get(ref.frame_id)),
            key=ref.key,
            kind=kind.name,
            attempt=attempt,
            input=self._input_for(ref, step_input) if kind.takes_input else None,
            holder=claimed_by,
            body_entered=body_entered,
            follow=follow if claimed_by else None,
        )
        opener = self.engine.opening
        if scope.frame.checkpoint.phase == OPENING:  # the run's first step after its turn came
            ended = opener.open(scope)
            if ended is not None:
                return ended
        elif opener.needs_driven_opening(scope.frame.checkpoint):  # an assembly run's first step
            ended = opener.open_driven(scope)
            if ended is not None:
                return ended
        transition = self._perform(scope, kind.body(scope))
        return self.engine.committer.commit(scope, transition)

    @staticmethod
    def _perform(scope: StepScope, body: StepBody) -> Transition:
        try:
            return body.perform()
        except (StartNotRecorded, StoreUnavailableError):
            # Not the run's outcome: the attempt fails and a later one decides (at_most_once), or
            # the store was out of reach past its patience (a worker's step comes back through the
            # scheduler, a local run through resume()).
            raise
        except (CancelledError, DeadlineExceededError, Exception) as exc:  # noqa: BLE001 - becomes the outcome
            return scope.ending_for(exc, body.partial_text)

    def _input_for(self, ref: StepRef, known: Any = _UNKNOWN) -> dict[str, Any] | None:
        """A step's input: ``known`` (read with the claim), remembered if this process
        scheduled the step, else read from the store."""
        if known is not _UNKNOWN:
            return cast(dict[str, Any] | None, known)
        remembered = self.registry.step_inputs.pop((ref.run_id, ref.key), _UNKNOWN)
        if remembered is not _UNKNOWN:
            return remembered
        step = self.store.load_step(ref.run_id, ref.key)
        if step is None:
            raise RunStateError(f"step {ref.key!r} of run {ref.run_id!r} does not exist")
        return step.input

    # -- the distributed protocol ---------------------------------------------------------

    def execute_claimed(
        self, run_id: str, key: str, *, redelivered: bool = True, follow: Follow | None = None
    ) -> tuple[ClaimedOutcome, list[StepRef]]:
        """Look up and claim (one transaction), execute, commit (Engine.execute_claimed)."""
        take_ending()  # what this thread's step before left: the caller takes this step's ending after it
        preclaimed = self.preclaims.take(run_id, key)
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
        registry = self.registry
        registry.note_interjections(run_id, start.interjections_pending)
        if start.run_status != "running":
            return "done", []
        if start.cancel_requested:
            registry.note_cancel_requested(run_id)
        else:
            registry.clear_stale_cancel(run_id)
        # The claim read the cancel flag just now: the step's first check need not poll it again.
        registry.flag_polls[run_id] = time.monotonic()
        if start.attempts is None:
            if step.status not in ("scheduled", "running"):
                return "done", self.engine.open_steps(run_id, unattended_only=True) if redelivered else []
            return "held", []
        if start.attempts > self.engine.max_step_attempts:
            self._give_up(run_id, key, start.attempts - 1, step.error)
            return "abandoned", []
        frame_record = start.frame
        assert frame_record is not None
        ref = StepRef(run_id, key, step.kind, step.frame_id)
        return self._execute_held(
            ref,
            start.attempts,
            claimed_at,
            lambda: self.engine.frames.adopt(frame_record, start.messages, start.messages_from),
            step.input,
            step.body_entered_at is not None,
            follow,
            run_record=start.run,
        )

    def _execute_preclaimed(
        self, preclaimed: Preclaimed, follow: Follow | None
    ) -> tuple[ClaimedOutcome, list[StepRef]]:
        """A step its scheduling commit claimed for this thread: what the claim would have read, the commit did."""
        ref = preclaimed.ref
        self.registry.flag_polls[ref.run_id] = preclaimed.claimed_at  # the commit read the cancel flag
        if not preclaimed.cancel_requested:
            self.registry.clear_stale_cancel(ref.run_id)
        frame = preclaimed.frame
        return self._execute_held(
            ref,
            1,
            preclaimed.claimed_at,
            lambda: frame if frame is not None else self.engine.frames.reload(ref.frame_id),
            preclaimed.input,
            False,
            follow,
        )

    def _execute_held(
        self,
        ref: StepRef,
        attempt: int,
        claimed_at: float,
        frame_of: Callable[[], FrameState],
        step_input: Any,
        body_entered: bool,
        follow: Follow | None,
        run_record: RunRecord | None = None,
    ) -> tuple[ClaimedOutcome, list[StepRef]]:
        """Execute a step this process holds (attempt ``attempt``) to its commit, keeping its lease alive.

        ``run_record`` is the run's row when the claim read it (a run not rebuilt here yet).
        """
        engine = self.engine
        # The lease is kept alive from the claim on: rebuilding the run (its agent's import,
        # every Hook.prepare_run) may outlast a lease, and a sweeper seeing it expire would
        # hand a step its live holder is about to execute to another worker.
        with engine.heartbeat.holding(ref.run_id, ref.key, attempt, claimed_at):
            try:
                frame = frame_of()
                run = self.registry.run_handle(
                    ref.run_id, run_record
                )  # a cancel from another process reaches its tools' context.check()
                with engine.cancel_watch.watching(ref.run_id, run.cancellation_token if run else None):
                    refs = self.execute(
                        ref,
                        attempt=attempt,
                        claimed_by=current_holder(),
                        frame=frame,
                        step_input=step_input,
                        body_entered=body_entered,
                        follow=follow,
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
        max_attempts = self.engine.max_step_attempts
        try:
            released = self.store.release_failed_step(
                run_id, key, current_holder(), failure_record(error, attempt), delay
            )
        except Exception:  # noqa: BLE001 - e.g. the store is down too: the lease brings the step back
            log.exception("could not give step %s of run %s back after its attempt failed", key, run_id)
            return
        if not released:
            return
        if attempt < max_attempts:
            then = f"attempt {attempt + 1} of {max_attempts} in {delay:.0f} s"
        else:
            then = f"that was the last of max_step_attempts ({max_attempts}): the run fails in {delay:.0f} s"
        log.warning(
            "attempt %d of step %s of run %s raised %s: %s; %s", attempt, key, run_id, type(error).__name__, error, then
        )

    def _give_up(self, run_id: str, key: str, attempts: int, last_error: dict[str, Any] | None) -> None:
        """End the run of a step that ran out of attempts (the poison-step limit, _step_failures)."""
        error = attempts_exhausted(run_id, key, attempts, last_error)
        log.error("%s", error)
        self.engine.end_run(run_id, "failed", error)

    def _claim_and_load(self, run_id: str, key: str) -> ClaimedStep:
        """Claim a step for this process with its frame (claim()'s rules, a dead holder's step included)."""
        holder = current_holder()
        lease = self.engine.lease_seconds
        # A run this process has not rebuilt yet (a task's first step, mostly) comes with its row.
        cached = {
            "known_messages": self.engine.frames.known_messages,
            "frame_guess": _frame_of(run_id, key),
            "with_run": not self.registry.has_run(run_id),
        }
        start = self.store.claim_and_load(run_id, key, holder, lease, **cached)
        step = start.step
        if start.attempts is None and step is not None and step.status == "running" and holder_is_dead(step.holder):
            start = self.store.claim_and_load(run_id, key, holder, lease, stale_holder=step.holder, **cached)
        return start

    def claim(self, run_id: str, key: str) -> int | None:
        """Claim a step for this process: attempts after the claim, or None if someone live holds it."""
        holder = current_holder()
        lease = self.engine.lease_seconds
        attempts = self.store.claim_step(run_id, key, holder, lease)
        if attempts is None:
            step = self.store.load_step(run_id, key)
            if step is not None and step.status == "running" and holder_is_dead(step.holder):
                attempts = self.store.claim_step(run_id, key, holder, lease, stale_holder=step.holder)
        return attempts


def _frame_of(run_id: str, key: str) -> str:
    """The frame a step most likely belongs to, for its claim to read only the messages not cached.

    A step's key starts with its frame's path (``root/turn-3/model``) and a frame's id
    is the run id and that path (``{run_id}/root``). Only a guess: when the step's
    frame turns out to be another, the claim reads that frame's whole history.
    """
    path, _turn, _rest = key.partition("/turn-")
    return f"{run_id}/{path}"


__all__ = ["ClaimedOutcome", "StepExecutor"]
