"""An ``at_most_once`` tool call never runs twice: does an attempt run it?

An attempt of the call's step may die anywhere (SIGKILL, a worker shutdown, a
database error, a claim lost to another worker) and another attempt then runs
the step again. Only an attempt that may have reached the tool's own code makes
the call's outcome unknown, so that point is recorded:

* right before the tool's code runs (its input validated, ``before_tool``
  done), the attempt writes ``body_entered_at`` on its step row in a flushed
  transaction, conditional on still holding its claim and on the run still
  running (``RunStore.mark_body_entered``); only then does the tool run;
* a later attempt reads the mark with its claim: set, an earlier attempt may
  have run the tool, and this one reports "outcome unknown" without calling
  it; not set, no attempt got that far (it died building its context,
  resolving the model, validating, in a callback...) and this one runs it.

What a re-attempt decides, by where the earlier attempt stopped:

    before its claim, or after it but before the mark   runs the tool
    while the mark was written, but it was not durable  runs the tool (the tool had not started)
    after the mark was durable (in or after the tool)   "outcome unknown"

An attempt whose mark finds its claim gone (another attempt claimed the step
after its lease expired, or its run ended and closed it) stops before the tool
with StepClaimLost; one whose mark cannot be written (the database is down)
raises StartNotRecorded, which gives the step back for a later attempt instead
of ending the run. The cost is one flushed write per call, for at_most_once
tools only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from lg_core.engine.leases import StepClaimLost
from lg_core.lease_holders import current_holder

if TYPE_CHECKING:
    from lg_core.engine._step_scope import StepScope


class StartNotRecorded(Exception):  # noqa: N818 - names what happened, like StepClaimLost
    """The mark that an at_most_once tool starts could not be written; the tool was not called.

    Not the run's outcome: the attempt fails (a worker gives the step back for a later
    attempt, a local run's caller gets the error) and a later attempt decides from the
    mark, which may or may not have been committed.
    """


def start_guard(scope: StepScope) -> Callable[[], None] | None:
    """Claim the call for this attempt; returns what records its start, or None when it must not run.

    None: an earlier attempt entered the tool (or, for a local run, the call cannot be
    claimed: its run has ended or a live process holds it), so the outcome is unknown.
    A worker claimed the step before executing it and read the mark with the claim
    (``scope.body_entered``); a local run claims it here.
    """
    if scope.holder is not None:
        return None if scope.body_entered else _recorder(scope, scope.holder, scope.attempt)
    engine = scope.engine
    attempt = engine.claim(scope.run.id, scope.key)
    if attempt is None:
        return None
    if attempt > 1:  # a first claim finds no mark: only a claim's holder writes one
        step = engine.store.load_step(scope.run.id, scope.key)
        if step is None or step.body_entered_at is not None:
            return None
    return _recorder(scope, current_holder(), attempt)


def _recorder(scope: StepScope, holder: str, attempt: int) -> Callable[[], None]:
    def record_start() -> None:
        """Write the mark, flushed, before the tool's code runs; raise rather than let it run unmarked.

        The mark waits out a store outage (Engine.patiently; writing it twice is harmless).
        """
        run_id, key, store = scope.run.id, scope.key, scope.engine.store
        try:
            marked = scope.patiently(lambda: store.mark_body_entered(run_id, key, holder, attempt))
        except Exception as exc:
            raise StartNotRecorded(
                f"step {key} of run {run_id}: could not record that its at_most_once tool starts "
                f"({type(exc).__name__}: {exc}); the tool was not called"
            ) from exc
        if not marked:
            raise StepClaimLost(
                f"step {key} of run {run_id} is no longer held by attempt {attempt} (another attempt "
                "claimed it, or its run ended); its at_most_once tool was not called"
            )

    return record_start


__all__ = ["StartNotRecorded", "start_guard"]
