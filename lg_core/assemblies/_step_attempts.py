"""The attempts of one child step under its StepPolicy: their deadlines, their records, when they settle.

A Graph node, a Swarm member's turn and a Workflow call each run their participant as a child
run (lg_core.assemblies.child_runs), and each may declare a policy (lg_core.assemblies._policy):
a timeout per attempt, and retries of the failures listed in ``retry_on``. Every attempt is a
child run of its own, under an id derived from the step and the attempt's number, so a step
executed again (woken by its child's ending, or after its worker died) finds the attempt's child
instead of starting a duplicate. What the three share is here:

* the attempt's deadline: its timeout counted from when its child starts, never later than the
  parent's own deadline. The child carries it, so the engine stops the timed-out child there as it
  stops any run whose deadline passed (its running work is asked to stop; a worker's scheduler
  ends it when no live step would), and the step's next attempt never overlaps a running one;
* the record of an ended attempt (``Assembly::Attempt``): the child run's own times, usage, status
  and sanitized error, a child stopped by its own deadline recorded as ``timed_out`` with an
  AssemblyStepTimeoutError;
* whether the step is settled after an attempt, or tries again;
* ``retry_delay``: the next attempt starts no sooner than that many seconds after the failed one
  ended (its child's stored finish time, so every execution of the step computes the same moment).
  A local step waits on the run's cancellation token (a cancel or the run's deadline ends the wait
  at once); a worker's step parks holding no thread, with ``wake_at`` at that moment, and the
  scheduler's ``wake_timed_steps`` wakes it. A step executed before then (woken by anything else)
  parks again until it; an attempt whose child already exists is never delayed again.

:class:`AttemptedChild` runs a Graph node's or Swarm member's attempts one after another. It keeps
no state between executions of its step: every execution reads the attempts' children from the
first on, recording each ended one, until it meets one to start, one still running (the step then
parks on it) or one that settles the step. (A Workflow call keeps its attempts in its call record
instead, as its replay needs, lg_core.assemblies._workflow_calls.) A step whose next attempt must
wait out ``retry_delay`` on a worker parks by :func:`park_until`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lg_core.agent_stream import AgentStreamStep
from lg_core.assemblies.child_runs import child_run_id, is_first_execution, start_or_find_child, step_child_id
from lg_core.assemblies.trajectory import Attempt, describe_error
from lg_core.engine.driven_frames import StaleStep
from lg_core.errors import AssemblyError, AssemblyStepTimeoutError, DeadlineExceededError, RunNotFoundError
from lg_core.usage import Usage

if TYPE_CHECKING:
    from lg_core.assemblies._policy import StepPolicy
    from lg_core.engine.driven_frames import FrameState, StepScope, Transition
    from lg_core.run import Run
    from lg_core.store import RunRecord, StepCommit


def attempt_key(step_key: str, number: int) -> str:
    """The key attempt ``number`` of step ``step_key`` derives its child run's id from: the step's own
    key for the first attempt (the child id a step without retries has), ``<key>/attempt-<number>``
    for each later one."""
    return step_key if number == 1 else f"{step_key}/attempt-{number}"


def attempt_child_id(parent_run_id: str, step_key: str, number: int) -> str:
    """The id of the child run attempt ``number`` of step ``step_key`` starts, before any retry of the
    parent run (whose later history epochs derive fresh ids: ``child_runs.step_child_id``)."""
    return child_run_id(parent_run_id, attempt_key(step_key, number))


def attempt_deadline(policy: StepPolicy, parent_deadline: datetime | None) -> datetime | None:
    """The deadline of an attempt starting now: its timeout from now, or the parent's deadline when sooner."""
    if policy.timeout is None:
        return parent_deadline
    own = datetime.fromtimestamp(time.time() + policy.timeout, UTC)
    return own if parent_deadline is None else min(own, parent_deadline)


@dataclass(frozen=True, slots=True)
class EndedAttempt:
    """One ended attempt: its stored record (JSON, an ``Attempt``'s fields) and its error, None when it completed."""

    record: dict[str, Any]
    error: BaseException | None


def stored_span(child: Run, store: Any, seen: Mapping[str, RunRecord] | None = None) -> tuple[float, float]:
    """When the ended run ``child`` was created and finished, as its run row says.

    A child run created and ended by this process (a local step's nested child) carries the
    times written for it, so no read is needed; any other (a child found ended, one resumed
    here, one ended by another process) is read from ``seen`` or the store.
    """
    created, finished = child._created_at, child._finished_at  # noqa: SLF001 - the engine's record of its writes
    if created is not None and finished is not None:
        return created, finished
    record = (seen or {}).get(child.id) or store.load_run(child.id)
    return record.created_at, record.finished_at or record.updated_at


def ended_attempt(
    what: str,
    policy: StepPolicy,
    number: int,
    child: Run,
    span: tuple[float, float],
    parent_deadline: datetime | None,
) -> EndedAttempt:
    """The record of attempt ``number`` whose child run ``child`` has ended; ``span`` is when the child was
    created and finished (``stored_span``).

    ``what`` names the step in a timeout's message (``graph node lookup``). A child stopped by the
    deadline of its own timeout (sooner than the parent's deadline) timed out.
    """
    status = child.outcome if child.outcome in ("completed", "partial", "cancelled") else "failed"
    error = None if child.completed else (child.error or AssemblyError(f"child run {child.id} ended {status}"))
    if error is not None and policy.timeout is not None and _timed_out(child, error, parent_deadline):
        status = "timed_out"
        error = AssemblyStepTimeoutError(f"{what} (child run {child.id}) exceeded its timeout of {policy.timeout:g} s")
    record = {
        "number": number,
        "child_run_id": child.id,
        "status": status,
        "started_at": _iso(span[0]),
        "finished_at": _iso(span[1]),
        "usage": child.usage.to_dict(),
        "error": None if error is None else describe_error(error),
    }
    return EndedAttempt(record, error)


def settles(policy: StepPolicy, number: int, error: BaseException | None) -> bool:
    """Whether attempt ``number`` ending with ``error`` settles its step: it completed, its error is not
    one ``retry_on`` lists, or it was the last attempt the policy allows."""
    return error is None or number > policy.retries or not isinstance(error, policy.retry_on)


def retry_not_before(policy: StepPolicy, previous: Mapping[str, Any]) -> float | None:
    """When the attempt after ``previous`` (an ended attempt's record) may start: its end plus
    ``retry_delay``, read from the child's stored finish time so that every execution of the step
    agrees; None for a policy without a delay."""
    if policy.retry_delay <= 0:
        return None
    return datetime.fromisoformat(previous["finished_at"]).timestamp() + policy.retry_delay


def delay_over(scope: StepScope, not_before: float) -> bool:
    """Whether the next attempt may start now, ``not_before`` being when its delay ends.

    A local step (no holder) waits here on the run's cancellation token, checking the run's
    cancel request and deadline as it goes, so either ends the wait at once (raised as the
    run's CancelledError or DeadlineExceededError). A worker's step must hold no thread: while
    time remains it returns False, and the step parks until ``not_before`` (:func:`park_until`).
    """
    while (remaining := not_before - time.time()) > 0:
        if scope.holder is not None:
            return False
        scope.check_interrupt()
        scope.run.cancellation_token.wait(min(remaining, _LOCAL_CHECK_SECONDS))
    scope.check_interrupt()
    return True


_LOCAL_CHECK_SECONDS = 0.25  # how often a local delay re-reads the run's cancel request and deadline


@dataclass(frozen=True, slots=True)
class Delayed:
    """A step whose next attempt waits out ``retry_delay`` on a worker: it parks until ``until`` (epoch s)."""

    until: float


def park_until(scope: StepScope, until: float, *, still_open: Callable[[FrameState], bool], what: str) -> Transition:
    """The transition committing a step as waiting, with no child, until ``until``: the scheduler's
    ``wake_timed_steps`` puts it back in the outbox then, and the run's cancel or deadline ends the run
    (the scheduler's ``end_runs``: no live step would). ``still_open(state)`` says whether the frame
    still expects this step's commit (else it is stale)."""

    def park(state: FrameState) -> StepCommit:
        if not still_open(state):
            raise StaleStep(f"{what} {scope.key} is already committed")
        return scope.commit_for(
            state, state.checkpoint, step_status="waiting", step_result={"waits_until": until}, wake_at=until
        )

    return park


def child_exists(scope: StepScope, child_id: str) -> bool:
    """Whether the child run ``child_id`` was started (by any execution of the step)."""
    try:
        scope.engine.store.load_run(child_id)
    except RunNotFoundError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Settled:
    """A step whose attempts are over: its last attempt's child, every attempt's record, the last error."""

    child: Run
    child_id: str
    attempts: list[dict[str, Any]]
    error: BaseException | None


@dataclass(slots=True)
class AttemptedChild:
    """The attempts of the step ``scope``: its participant asked ``message`` by child runs under ``policy``.

    ``what`` names the step in errors; ``options`` are the child's own invocation fields (a node's
    opted-in history and context); ``prepare(child_id)`` runs before each attempt's child is
    started or found; ``seen`` collects the ended children's stored records as
    ``start_or_find_child`` does.
    """

    scope: StepScope
    policy: StepPolicy
    what: str
    participant: Any
    message: Any
    stream_step: AgentStreamStep
    options: dict[str, Any] = field(default_factory=dict)
    prepare: Callable[[str], None] = lambda _child_id: None
    seen: dict[str, RunRecord] = field(default_factory=dict)

    def settle(self) -> Settled | Delayed | str:
        """The settled step, the id of the current attempt's child still running on the workers, or the
        time a worker's step waits for before its next attempt may start (``retry_delay``)."""
        scope = self.scope
        parent_deadline = scope.run.invocation.deadline_at
        attempts: list[dict[str, Any]] = []
        # A step's first execution has started none of its attempts' children: none is looked up.
        first_execution = is_first_execution(scope)
        number = 1
        while True:
            child_id = step_child_id(scope, attempt_key(scope.key, number))
            not_before = retry_not_before(self.policy, attempts[-1]) if attempts else None
            if not_before is not None and time.time() < not_before and not child_exists(scope, child_id):
                if not delay_over(scope, not_before):
                    return Delayed(not_before)
            self.prepare(child_id)
            options = {**self.options, "deadline_at": attempt_deadline(self.policy, parent_deadline)}
            child = start_or_find_child(
                scope,
                self.participant,
                self.message,
                child_id,
                self.stream_step,
                seen=self.seen,
                first_execution=first_execution,
                **options,
            )
            if child is None:
                return child_id
            scope.check_interrupt()  # a child stopped by its parent's cancel or deadline: the parent stops too
            span = stored_span(child, scope.engine.store, self.seen)
            ended = ended_attempt(self.what, self.policy, number, child, span, parent_deadline)
            attempts.append(ended.record)
            if settles(self.policy, number, ended.error):
                return Settled(child, child_id, attempts, ended.error)
            number += 1


def attempts_of(record: Mapping[str, Any]) -> tuple[Attempt, ...]:
    """A committed node's or member's Attempts: its recorded ones, or, for a record that keeps none,
    the one attempt its own times, status and usage describe."""
    recorded = record.get("attempts")
    if recorded:
        return tuple(Attempt.from_dict(item) for item in recorded)
    return (
        Attempt(
            number=1,
            started_at=datetime.fromisoformat(record["started_at"]),
            finished_at=datetime.fromisoformat(record["finished_at"]),
            status=record["status"],
            usage=Usage.from_dict(record.get("usage")),
            error=record.get("error"),
        ),
    )


def _timed_out(child: Run, error: BaseException, parent_deadline: datetime | None) -> bool:
    """Whether ``child`` was stopped by its attempt's own deadline: one sooner than the parent's, so the
    stop was the timeout's and not the parent run's (read the same by every execution of the step)."""
    stopped = child.partial or isinstance(error, DeadlineExceededError)
    own = child.invocation.deadline_at
    return stopped and own is not None and (parent_deadline is None or own < parent_deadline)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


__all__ = [
    "AttemptedChild",
    "Delayed",
    "EndedAttempt",
    "Settled",
    "attempt_child_id",
    "attempt_deadline",
    "attempts_of",
    "child_exists",
    "delay_over",
    "ended_attempt",
    "park_until",
    "retry_not_before",
    "settles",
    "stored_span",
]
