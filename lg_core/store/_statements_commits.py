"""Statements of a step's commit: the guarded updates of run, frame and step, and the rows it inserts.

Each guard is an UPDATE's WHERE (the run still running, the frame at the version
its step started from, the step still open or held). The ``*_or_fail`` forms fail
on the server instead, so a plain commit on PostgreSQL goes out in one round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import and_, bindparam, func, literal, null, or_, select, update
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement

from lg_core.store._statement_parts import insert_of, later, open_step
from lg_core.store.schema import events, frames, runs, steps


def _bump_run(finish: bool) -> Callable[[], ClauseElement]:
    def build() -> ClauseElement:
        values = {
            "event_seq": runs.c.event_seq + bindparam("n"),
            "updated_at": bindparam("now"),
        }
        if finish:
            for name in ("status", "response", "error", "usage", "result"):
                values[name] = bindparam(name)
            values["finished_at"] = bindparam("now")
            values["holder"] = null()
            values["lease_until"] = null()
        return (
            update(runs)
            .where(and_(runs.c.id == bindparam("run_id"), runs.c.status == "running"))
            .values(values)
            .returning(runs.c.event_seq, runs.c.cancel_requested, runs.c.interjections_pending)
        )

    return build


def _complete_step(held: bool) -> Callable[[], ClauseElement]:
    def build() -> ClauseElement:
        condition = and_(
            steps.c.run_id == bindparam("run_id"),
            steps.c.key == bindparam("key"),
            open_step(),
        )
        if held:
            condition = and_(condition, steps.c.holder == bindparam("holder"))
        return (
            update(steps)
            .where(condition)
            .values(
                status=bindparam("status"),
                result=bindparam("result"),
                error=bindparam("error"),
                checkpoint=bindparam("checkpoint"),
                # The run's event count as this commit's bump_run (the statement before) left it.
                event_seq=select(runs.c.event_seq).where(runs.c.id == bindparam("run_id")).scalar_subquery(),
                finished_at=bindparam("now"),
                holder=null(),
                lease_until=null(),
                dispatch_after=null(),
            )
        )

    return build


def _update_frame() -> ClauseElement:
    """The frame's new checkpoint, only at the version its step started from."""
    return (
        update(frames)
        .where(and_(frames.c.id == bindparam("frame_id"), frames.c.version == bindparam("expected")))
        .values(version=bindparam("version"), checkpoint=bindparam("checkpoint"), updated_at=bindparam("now"))
    )


def _failing_without_a_row(build: Callable[[], Any], *returned: ColumnElement[Any]) -> Callable[[], ClauseElement]:
    """``build()``'s guarded UPDATE, made to fail on the server when its guard matched no row.

    PostgreSQL only (a data-modifying CTE). A step commit's guards (the run still
    running, the frame at the version its step started from, the step still held)
    are each an UPDATE's WHERE. Read by the client, they cost the commit a round
    trip before its inserts and COMMIT may go out; failing instead (division by
    the CTE's row count: ``division_by_zero``, SQLSTATE 22012), they abort the
    transaction on the server, so the whole commit goes out at once. Returns one
    row: the UPDATE's returned columns, then ``applied`` (1).
    """

    def built() -> ClauseElement:
        statement = build()
        if returned:
            statement = statement.returning(*returned)
        guarded = statement.cte("guarded")
        applied = literal(1) // select(func.count()).select_from(guarded).scalar_subquery()
        values = [select(column).scalar_subquery().label(column.key) for column in guarded.c]
        return select(*values, applied.label("applied"))

    return built


def _insert_numbered_events() -> ClauseElement:
    """An event numbered from the run's counter this commit's bump just advanced: ``back`` before its last."""
    last = select(runs.c.event_seq).where(runs.c.id == bindparam("run_id")).scalar_subquery()
    # inline(): the key is computed in SQL, and nothing reads it back (no implicit RETURNING).
    return insert_of(events, ("run_id", "type", "data", "created_at"), seq=last - bindparam("back"))().inline()


def _child_run_ended() -> ClauseElement:
    """Whether the child run a parking step waits for has ended (FOR SHARE on PostgreSQL).

    The share lock orders the park against the child's ending: a child whose ending
    commit already updated its row is waited for (and seen ended: the step does not
    park), and an ending that comes later waits for the park to commit, then wakes it.
    """
    return select(runs.c.finished_at).where(runs.c.id == bindparam("child")).with_for_update(read=True)


def _wake_parent_step() -> ClauseElement:
    """Put back in the outbox the parked step of the parent run that waits for this (ending) run.

    Its attempts start again from zero: parking was a committed outcome, not a failed attempt, and a
    workflow's perform step parks and is woken once per child it waits for, which must not count
    towards ``max_step_attempts``, the limit on attempts that crash."""
    parent = select(runs.c.parent_run_id).where(runs.c.id == bindparam("run_id")).scalar_subquery()
    parent_step = select(runs.c.parent_step_key).where(runs.c.id == bindparam("run_id")).scalar_subquery()
    return (
        update(steps)
        .where(and_(steps.c.run_id == parent, steps.c.key == parent_step, steps.c.status == "waiting"))
        .values(status="scheduled", finished_at=null(), relays=0, attempts=0, dispatch_after=later("dispatch_delay"))
        .returning(steps.c.run_id, steps.c.key, steps.c.kind, steps.c.frame_id)
    )


def _wake_step() -> ClauseElement:
    """Put back in the outbox one parked step of this run (a subagent wait a child turn's ending answers).

    Its timer is cleared and its attempts start again from zero, as a step woken by its child run's."""
    return (
        update(steps)
        .where(
            and_(steps.c.run_id == bindparam("run_id"), steps.c.key == bindparam("key"), steps.c.status == "waiting")
        )
        .values(
            status="scheduled",
            finished_at=null(),
            relays=0,
            attempts=0,
            wake_at=null(),
            dispatch_after=later("dispatch_delay"),
        )
        .returning(steps.c.run_id, steps.c.key, steps.c.kind, steps.c.frame_id)
    )


def _set_wake_at() -> ClauseElement:
    """The time a parking step is woken if nothing wakes it sooner (the scheduler's ``wake_timed_steps``)."""
    return (
        update(steps)
        .where(and_(steps.c.run_id == bindparam("run_id"), steps.c.key == bindparam("key")))
        .values(wake_at=bindparam("wake_at"))
    )


def _cancel_children() -> ClauseElement:
    """Ask the running child runs of an ending run to stop (their steps see the flag)."""
    return (
        update(runs)
        .where(
            and_(
                runs.c.parent_run_id == bindparam("run_id"),
                runs.c.parent_step_key.isnot(None),
                runs.c.status == "running",
            )
        )
        .values(cancel_requested=1, updated_at=bindparam("now"))
    )


def _close_open_steps() -> ClauseElement:
    """Close the steps a finishing run leaves open (``status``: lg_core.store.records.ended_step_status).

    Their claims end with them (holder and lease cleared), so a live attempt's lease
    renewal, its at_most_once mark and its commit all find nothing to update. The row
    keeps its input, attempts, error and body mark, and no ``event_seq`` (it committed
    nothing): ``lg runs retry`` reschedules it as a step that never finished.
    """
    return (
        update(steps)
        .where(and_(steps.c.run_id == bindparam("run_id"), or_(open_step(), steps.c.status == "waiting")))
        .values(
            status=bindparam("status"),
            finished_at=bindparam("now"),
            holder=null(),
            lease_until=null(),
            dispatch_after=null(),
        )
    )


COMMIT_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    # dispatch_delay: the relay's grace for a scheduled step, NULL for a pending one (not in the outbox yet).
    "insert_steps": insert_of(
        steps,
        ("run_id", "key", "frame_id", "kind", "status", "input", "attempts", "created_at", "scheduled_by"),
        dispatch_after=later("dispatch_delay"),
    ),
    # A successor its scheduling commit also claims, for the committing worker to run next
    # (lg_workers.continuation): as a claim leaves it, attempt 1, out of the outbox.
    "insert_claimed_step": insert_of(
        steps,
        (
            "run_id",
            "key",
            "frame_id",
            "kind",
            "status",
            "input",
            "attempts",
            "created_at",
            "scheduled_by",
            "holder",
            "started_at",
        ),
        lease_until=later("lease_seconds"),
    ),
    "insert_done_step": insert_of(
        steps,
        (
            "run_id",
            "key",
            "frame_id",
            "kind",
            "status",
            "attempts",
            "created_at",
            "finished_at",
            "checkpoint",
            "event_seq",
        ),
    ),
    "bump_run": _bump_run(finish=False),
    "finish_run": _bump_run(finish=True),
    "update_frame": _update_frame,
    "complete_step": _complete_step(held=False),
    "complete_held_step": _complete_step(held=True),
    # A plain step commit in one round trip (PostgreSQL: RunStore._commit_at_once).
    "bump_run_or_fail": _failing_without_a_row(_bump_run(finish=False)),
    "update_frame_or_fail": _failing_without_a_row(_update_frame, frames.c.version),
    "complete_step_or_fail": _failing_without_a_row(_complete_step(held=False), steps.c.status),
    "complete_held_step_or_fail": _failing_without_a_row(_complete_step(held=True), steps.c.status),
    "insert_numbered_events": _insert_numbered_events,
    "close_open_steps": _close_open_steps,
    "child_run_ended": _child_run_ended,
    "wake_parent_step": _wake_parent_step,
    "wake_step": _wake_step,
    "set_wake_at": _set_wake_at,
    "cancel_children": _cancel_children,
}

__all__ = ["COMMIT_STATEMENTS"]
