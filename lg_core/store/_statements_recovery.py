"""Statements of the scheduler's recovery scans (lg_scheduler.recovery).

Only distributed runs (no run holder) are recovered: a local run belongs to the
process holding it, and `lg runs resume` takes it over when that process dies.
Each write is conditional, so several schedulers may run these at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import and_, bindparam, case, func, or_, select, tuple_, update
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.schema import Column

from lg_core.store._clock import store_now
from lg_core.store._statement_parts import STEP_COLUMNS, held_by_holder, later, open_step
from lg_core.store.schema import runs, steps


def _distributed_running() -> ColumnElement[bool]:
    return and_(runs.c.status == "running", runs.c.holder.is_(None))


def _step_columns() -> list[Column[Any]]:
    return [steps.c[name] for name in STEP_COLUMNS]


def _relay_due_steps() -> ClauseElement:
    """Scheduled steps whose message is overdue: count the send, push them a grace forward and
    return them, in one UPDATE.

    The UPDATE is the relay's claim: a second scheduler running it at once re-checks
    ``dispatch_after`` on the locked rows and skips what the first one took. A step whose
    back-off is longer than a grace is pushed further by ``push_relayed_step`` in the same
    transaction, while the rows are still locked.
    """
    due = steps.alias("due")
    picked = (
        select(due.c.run_id, due.c.key)
        .select_from(due.join(runs, runs.c.id == due.c.run_id))
        .where(and_(due.c.status == "scheduled", due.c.dispatch_after < store_now(), _distributed_running()))
        .order_by(due.c.dispatch_after)
        .limit(bindparam("limit"))
    )
    return (
        update(steps)
        .where(
            and_(
                steps.c.status == "scheduled",
                steps.c.dispatch_after < store_now(),
                tuple_(steps.c.run_id, steps.c.key).in_(picked),
            )
        )
        .values(dispatch_after=later("grace"), relays=steps.c.relays + 1)
        .returning(*_step_columns(), steps.c.relays)
    )


def _push_relayed_step() -> ClauseElement:
    """A step the relay just sent is due again ``delay`` from now (its back-off); only the very
    send counted (``relays``), in the relay's own transaction."""
    return (
        update(steps)
        .where(
            and_(
                steps.c.run_id == bindparam("run_id"),
                steps.c.key == bindparam("key"),
                steps.c.status == "scheduled",
                steps.c.relays == bindparam("relays"),
            )
        )
        .values(dispatch_after=later("delay"))
    )


def _touch_stalled_runs() -> ClauseElement:
    """Runs with no commit for a long time, the ``limit`` longest quiet first; touching
    ``updated_at`` is the detector's claim (a second scheduler re-checks it on the locked rows)."""
    quiet = runs.alias("quiet")
    stalled = and_(runs.c.status == "running", runs.c.holder.is_(None), runs.c.updated_at < bindparam("cutoff"))
    picked = (
        select(quiet.c.id)
        .where(and_(quiet.c.status == "running", quiet.c.holder.is_(None), quiet.c.updated_at < bindparam("cutoff")))
        .order_by(quiet.c.updated_at)
        .limit(bindparam("limit"))
    )
    return (
        update(runs)
        .where(and_(stalled, runs.c.id.in_(picked)))
        .values(updated_at=bindparam("now"))
        .returning(runs.c.id)
    )


def _has_leased_step() -> ColumnElement[bool]:
    """The run has a running step whose lease has not expired (its holder may be alive)."""
    return (
        select(steps.c.key)
        .where(and_(steps.c.run_id == runs.c.id, steps.c.status == "running", steps.c.lease_until >= store_now()))
        .exists()
    )


def _tracked_step() -> ColumnElement[int]:
    """1 when an open step will be sent again or finished without the stall detector, else 0.

    Tracked: the relay sent it (it is on its back-off), a live lease holds it, or it
    is not due yet (a failed attempt's retry delay, up to a minute): the relay
    sends it when it is due, and re-sending it before would cut the delay short.
    """
    live_lease = and_(steps.c.status == "running", steps.c.lease_until >= store_now())
    waiting = steps.c.dispatch_after > store_now()
    return case((or_(steps.c.relays > 0, live_lease, waiting), 1), else_=0)


def _not_swept_recently() -> ColumnElement[bool]:
    return or_(steps.c.dispatch_after.is_(None), steps.c.dispatch_after < store_now())


def _wake_timed_steps() -> ClauseElement:
    """Parked steps whose timer passed (``wake_at``: a subagent wait's long poll, a retry_delay), back in the outbox and
    returned to be sent, in one UPDATE: a second scheduler re-checks the status on the locked rows."""
    due = steps.alias("due")
    picked = (
        select(due.c.run_id, due.c.key)
        .where(and_(due.c.wake_at.isnot(None), due.c.wake_at < store_now(), due.c.status == "waiting"))
        .order_by(due.c.wake_at)
        .limit(bindparam("limit"))
    )
    return (
        update(steps)
        .where(and_(steps.c.status == "waiting", tuple_(steps.c.run_id, steps.c.key).in_(picked)))
        .values(status="scheduled", finished_at=None, relays=0, attempts=0, wake_at=None, dispatch_after=later("grace"))
        .returning(*[steps.c[name] for name in STEP_COLUMNS])
    )


RECOVERY_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "wake_timed_steps": _wake_timed_steps,
    # The time leases are judged by (lg_core.store._clock): a scheduler pass reads it once.
    "select_clock": lambda: select(store_now()),
    "relay_due_steps": _relay_due_steps,
    "push_relayed_step": _push_relayed_step,
    # Running steps not re-dispatched within their back-off, with their re-sends since their
    # claim (``relays``); the caller judges their leases.
    # Oldest lease first: a fleet may run more steps than one pass reads, and a live holder
    # renews its lease every third of it, so expired and unrenewed (dead) claims come first.
    "select_running_steps": lambda: (
        select(*_step_columns(), steps.c.relays)
        .select_from(steps.join(runs, runs.c.id == steps.c.run_id))
        .where(and_(steps.c.status == "running", _not_swept_recently(), _distributed_running()))
        .order_by(func.coalesce(steps.c.lease_until, 0))
        .limit(bindparam("limit"))
    ),
    # Mark a dead claim as re-dispatched, due again after its back-off ``delay``: only if it is
    # still the claim and the count the caller read (one scheduler wins); the next claim clears both.
    "resweep_step": lambda: (
        update(steps)
        .where(and_(held_by_holder(), _not_swept_recently(), steps.c.relays == bindparam("relays")))
        .values(dispatch_after=later("delay"), relays=steps.c.relays + 1)
    ),
    # A distributed run's open steps, each flagged when a sweep or a holder already sees to it
    # (lg_scheduler.recovery.detect_stalled): sent by the relay or the lease sweeper, which
    # back it off (``relays`` > 0), or running under a lease that has not expired.
    "select_open_steps_tracked": lambda: (
        select(*_step_columns(), _tracked_step())
        .where(and_(steps.c.run_id == bindparam("run_id"), open_step()))
        .order_by(steps.c.key)
    ),
    "touch_stalled_runs": _touch_stalled_runs,
    # Distributed runs a cancel request or a passed deadline should end; pending ones too
    # once their deadline passed while they waited for their session.
    # Runs with a step under a valid lease come last: their live step ends them itself, and
    # a pass that read only those (``limit``) would end nothing while others wait.
    "select_runs_to_end": lambda: (
        select(*runs.c)
        .where(
            or_(
                and_(_distributed_running(), or_(runs.c.cancel_requested == 1, runs.c.deadline_at < store_now())),
                and_(runs.c.status == "pending", runs.c.holder.is_(None), runs.c.deadline_at < store_now()),
            )
        )
        .order_by(case((_has_leased_step(), 1), else_=0), runs.c.created_at)
        .limit(bindparam("limit"))
    ),
}

__all__ = ["RECOVERY_STATEMENTS"]
