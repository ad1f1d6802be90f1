"""Statements on steps: claims, leases, the at_most_once mark, and reading steps back.

A claim is a conditional UPDATE (the step scheduled, its lease expired, or its
holder dead, and its run running); its lease is written from the store's clock
(lg_core.store._clock), and only the holder's heartbeat renews it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    Integer,
    and_,
    bindparam,
    case,
    func,
    literal,
    null,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.schema import Column

from lg_core.store._clock import store_now
from lg_core.store._statement_parts import STEP_COLUMNS, held_by_holder, later, open_step, select_of
from lg_core.store.schema import frames, messages, runs, steps


def _claimable() -> ColumnElement[bool]:
    """Scheduled, or running with an expired lease, or held by ``stale_holder`` (a dead process)."""
    return or_(
        steps.c.status == "scheduled",
        and_(steps.c.status == "running", steps.c.lease_until < store_now()),
        and_(steps.c.status == "running", steps.c.holder == bindparam("stale_holder")),
    )


def _claim_values() -> dict[str, Any]:
    return {
        "status": "running",
        "holder": bindparam("holder"),
        "lease_until": later("lease_seconds"),
        "attempts": steps.c.attempts + 1,
        "started_at": bindparam("now"),  # the claiming host's time, as the step's finished_at
        # A fresh claim may be swept as soon as it looks dead (see resweep_step).
        "dispatch_after": null(),
        # A consumer took it: the relay's back-off starts afresh (lg_core.store.resend_backoff).
        "relays": 0,
    }


def _claimable_of_running_run() -> ColumnElement[bool]:
    """Step ``key`` of run ``run_id``, claimable (see _claimable), while its run is running."""
    return and_(
        steps.c.run_id == bindparam("run_id"),
        steps.c.key == bindparam("key"),
        _claimable(),
        _of_the_run(runs.c.status) == "running",
    )


def _claim_step() -> ClauseElement:
    """A local at_most_once call's claim: only while its run is running, so a call of a run
    that has ended (a sibling failed it, recovery ended it) never starts."""
    return update(steps).where(_claimable_of_running_run()).values(_claim_values()).returning(steps.c.attempts)


def _of_the_run(column: Column[Any]) -> ColumnElement[Any]:
    """A column of the claimed step's run, as a scalar subquery (SQLite's RETURNING cannot name a FROM table).

    Keyed by the ``run_id`` parameter, not correlated: SQLite's RETURNING drops
    table qualifiers, which would make a correlated ``lg_runs.id = lg_steps.run_id``
    ambiguous.
    """
    return select(column).where(runs.c.id == bindparam("run_id")).scalar_subquery()


def _claim_step_of_running_run() -> ClauseElement:
    """A worker's claim: only while the run is running; returns the step as claimed and the run's flags."""
    return (
        update(steps)
        .where(_claimable_of_running_run())
        .values(_claim_values())
        .returning(
            *[steps.c[name] for name in STEP_COLUMNS],
            _of_the_run(runs.c.status),
            _of_the_run(runs.c.cancel_requested),
            _of_the_run(runs.c.interjections_pending),
        )
    )


def _mark_body_entered() -> ClauseElement:
    """Record that an at_most_once call's tool starts, only for the claim that runs it.

    Conditional on the claim (``holder`` and ``attempt``: a thread of the same process
    may have claimed the step again) and on its run still running, so an attempt whose
    step was taken over, or closed with its ended run, marks nothing and must not call
    the tool. An earlier mark is kept (COALESCE): a retried statement whose first try
    applied finds its own row again instead of nothing.
    """
    return (
        update(steps)
        .where(
            and_(held_by_holder(), steps.c.attempts == bindparam("attempt"), _of_the_run(runs.c.status) == "running")
        )
        .values(body_entered_at=func.coalesce(steps.c.body_entered_at, bindparam("now")))
    )


def _claimed_frame_with_tail() -> ClauseElement:
    """The frame of the step ``holder`` has just claimed: its row, then its messages, in one snapshot.

    The row comes first with seq -1 (checkpoint in ``data``, then version, path,
    kind, entrypoint), then the messages in order. It is read in the claim's
    transaction.

    The frame id comes from the claimed step row, so the read can be sent with the
    claim instead of after it. The caller's cached messages are known per frame:
    it names the frame it guesses (``guess_frame``) and how many of its messages
    it has (``guess_seq``); another frame is read whole. Nothing is returned when
    ``holder`` does not hold the step (the claim failed).
    """
    frame_id = select(steps.c.frame_id).where(held_by_holder()).scalar_subquery()
    from_seq = case((frame_id == bindparam("guess_frame"), bindparam("guess_seq")), else_=0)
    row = select(
        literal(-1).label("seq"),
        frames.c.checkpoint.label("data"),
        frames.c.version,
        frames.c.path,
        frames.c.kind,
        frames.c.entrypoint,
    ).where(frames.c.id == frame_id)
    tail = select(messages.c.seq, messages.c.data, null(), null(), null(), null()).where(
        and_(messages.c.frame_id == frame_id, messages.c.seq >= from_seq)
    )
    return union_all(row, tail).order_by("seq")


STEP_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "claim_step": _claim_step,
    "claim_step_of_running_run": _claim_step_of_running_run,
    "mark_body_entered": _mark_body_entered,
    "select_claimed_frame_with_tail": _claimed_frame_with_tail,
    # Only the steps the holder is executing (Heartbeat): a claim it left behind must expire.
    # A running step, or a Run.once claim ("started"), this holder is executing; for a step,
    # the very attempt it executes (``attempt``; NULL: any), since a thread of the same process
    # (the same holder) may have claimed it again after its lease expired.
    "renew_lease": lambda: (
        update(steps)
        .where(
            and_(
                steps.c.run_id == bindparam("run_id"),
                steps.c.key == bindparam("key"),
                or_(steps.c.status == "running", steps.c.status == "started"),
                steps.c.holder == bindparam("holder"),
                steps.c.attempts == func.coalesce(bindparam("attempt", type_=Integer()), steps.c.attempts),
            )
        )
        .values(lease_until=later("lease_seconds"))
    ),
    # A step whose attempt raised goes back to the outbox, due after its retry delay, with
    # the error kept for `lg runs show` and for the run's error if the attempt limit ends it.
    "release_failed_step": lambda: (
        update(steps)
        .where(held_by_holder())
        .values(
            status="scheduled",
            holder=null(),
            lease_until=null(),
            error=bindparam("error"),
            dispatch_after=later("delay"),
            relays=0,
        )
    ),
    "select_step": lambda: select_of(
        steps, STEP_COLUMNS, steps.c.run_id == bindparam("run_id"), steps.c.key == bindparam("key")
    ),
    "select_step_and_run": lambda: (
        select(
            *[steps.c[name] for name in STEP_COLUMNS],
            runs.c.status,
            runs.c.cancel_requested,
            runs.c.interjections_pending,
        )
        .select_from(steps.join(runs, runs.c.id == steps.c.run_id))
        .where(and_(steps.c.run_id == bindparam("run_id"), steps.c.key == bindparam("key")))
    ),
    "select_steps_like": lambda: select_of(
        steps, STEP_COLUMNS, steps.c.run_id == bindparam("run_id"), steps.c.key.like(bindparam("pattern"), escape="\\")
    ).order_by(steps.c.created_at, steps.c.key),
    "select_open_steps": lambda: select_of(
        steps, STEP_COLUMNS, steps.c.run_id == bindparam("run_id"), open_step()
    ).order_by(steps.c.created_at, steps.c.key),
    "select_steps_of_run": lambda: select_of(steps, STEP_COLUMNS, steps.c.run_id == bindparam("run_id")).order_by(
        steps.c.created_at, steps.c.key
    ),
}

__all__ = ["STEP_STATEMENTS"]
