"""Named SQL statements of the run store, built with SQLAlchemy Core.

Each builder is compiled once per dialect by :class:`~lg_core.store.database.Database`
and parameters are bound by name, so SQLite and PostgreSQL share this file.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import and_, bindparam, func, insert, null, or_, select, update
from sqlalchemy.sql import ClauseElement

from lg_core.store.schema import events, frames, interjections, lg_meta, messages, runs, steps

RUN_COLUMNS = tuple(c.name for c in runs.columns)
FRAME_COLUMNS = ("id", "run_id", "path", "kind", "entrypoint", "version", "checkpoint")
STEP_COLUMNS = (
    "run_id", "key", "frame_id", "kind", "status", "input", "result", "error",
    "attempts", "holder", "lease_until", "created_at", "started_at", "finished_at",
    "scheduled_by", "checkpoint", "event_seq",
)


def _open_step() -> ClauseElement:
    # Two comparisons rather than IN (...): IN with literals needs SQLAlchemy's
    # post-compile expansion, which the compiled-once statements skip.
    return or_(steps.c.status == "scheduled", steps.c.status == "running")


def _insert(table: object, columns: tuple[str, ...]) -> Callable[[], ClauseElement]:
    return lambda: insert(table).values({name: bindparam(name) for name in columns})  # type: ignore[arg-type]


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
            .returning(runs.c.event_seq, runs.c.cancel_requested)
        )

    return build


def _complete_step(held: bool) -> Callable[[], ClauseElement]:
    def build() -> ClauseElement:
        condition = and_(
            steps.c.run_id == bindparam("run_id"),
            steps.c.key == bindparam("key"),
            _open_step(),
        )
        if held:
            condition = and_(condition, steps.c.holder == bindparam("holder"))
        return update(steps).where(condition).values(
            status=bindparam("status"),
            result=bindparam("result"),
            error=bindparam("error"),
            checkpoint=bindparam("checkpoint"),
            event_seq=bindparam("event_seq"),
            finished_at=bindparam("now"),
            holder=null(),
            lease_until=null(),
            dispatch_after=null(),
        )

    return build


def _claim_step() -> ClauseElement:
    open_or_expired = or_(
        steps.c.status == "scheduled",
        and_(steps.c.status == "running", steps.c.lease_until < bindparam("now")),
        and_(steps.c.status == "running", steps.c.holder == bindparam("stale_holder")),
    )
    return (
        update(steps)
        .where(and_(steps.c.run_id == bindparam("run_id"), steps.c.key == bindparam("key"), open_or_expired))
        .values(
            status="running",
            holder=bindparam("holder"),
            lease_until=bindparam("lease_until"),
            attempts=steps.c.attempts + 1,
            started_at=bindparam("now"),
        )
        .returning(steps.c.attempts)
    )


def _select(table: object, columns: tuple[str, ...], *conditions: ClauseElement) -> ClauseElement:
    cols = [table.c[name] for name in columns]  # type: ignore[attr-defined]
    return select(*cols).where(and_(*conditions))


STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "select_meta": lambda: select(lg_meta.c.value).where(lg_meta.c.key == bindparam("key")),
    "insert_meta": _insert(lg_meta, ("key", "value")),
    "insert_run": _insert(runs, RUN_COLUMNS),
    "insert_frame": _insert(frames, FRAME_COLUMNS + ("updated_at",)),
    "insert_messages": _insert(messages, ("frame_id", "seq", "run_id", "role", "data", "created_at")),
    "insert_events": _insert(events, ("run_id", "seq", "type", "data", "created_at")),
    "insert_steps": _insert(
        steps,
        ("run_id", "key", "frame_id", "kind", "status", "input", "attempts", "dispatch_after", "created_at", "scheduled_by"),
    ),
    "insert_done_step": _insert(
        steps,
        ("run_id", "key", "frame_id", "kind", "status", "attempts", "created_at", "finished_at", "checkpoint", "event_seq"),
    ),
    "bump_run": _bump_run(finish=False),
    "bump_run_any": lambda: update(runs)
    .where(runs.c.id == bindparam("run_id"))
    .values(event_seq=runs.c.event_seq + bindparam("n"), updated_at=bindparam("now"))
    .returning(runs.c.event_seq),
    "finish_run": _bump_run(finish=True),
    "update_frame": lambda: update(frames)
    .where(and_(frames.c.id == bindparam("frame_id"), frames.c.version == bindparam("expected")))
    .values(version=bindparam("version"), checkpoint=bindparam("checkpoint"), updated_at=bindparam("now")),
    "complete_step": _complete_step(held=False),
    "complete_held_step": _complete_step(held=True),
    "claim_step": _claim_step,
    "select_run": lambda: _select(runs, RUN_COLUMNS, runs.c.id == bindparam("run_id")),
    "select_runs": lambda: select(*runs.c).order_by(runs.c.created_at.desc()).limit(bindparam("limit")),
    "select_runs_by_status": lambda: select(*runs.c)
    .where(runs.c.status == bindparam("status"))
    .order_by(runs.c.created_at.desc())
    .limit(bindparam("limit")),
    "select_run_flags": lambda: select(runs.c.status, runs.c.cancel_requested, runs.c.holder).where(
        runs.c.id == bindparam("run_id")
    ),
    "select_frame": lambda: _select(frames, FRAME_COLUMNS, frames.c.id == bindparam("frame_id")),
    "select_frames_of_run": lambda: _select(frames, FRAME_COLUMNS, frames.c.run_id == bindparam("run_id")),
    "select_messages": lambda: select(messages.c.seq, messages.c.data)
    .where(and_(messages.c.frame_id == bindparam("frame_id"), messages.c.seq >= bindparam("from_seq")))
    .order_by(messages.c.seq),
    "select_step": lambda: _select(
        steps, STEP_COLUMNS, steps.c.run_id == bindparam("run_id"), steps.c.key == bindparam("key")
    ),
    "select_step_and_run": lambda: select(*[steps.c[name] for name in STEP_COLUMNS], runs.c.status, runs.c.cancel_requested)
    .select_from(steps.join(runs, runs.c.id == steps.c.run_id))
    .where(and_(steps.c.run_id == bindparam("run_id"), steps.c.key == bindparam("key"))),
    "select_steps_like": lambda: _select(
        steps, STEP_COLUMNS, steps.c.run_id == bindparam("run_id"), steps.c.key.like(bindparam("pattern"), escape="\\")
    ).order_by(steps.c.created_at, steps.c.key),
    "select_open_steps": lambda: _select(
        steps, STEP_COLUMNS, steps.c.run_id == bindparam("run_id"), _open_step()
    ).order_by(steps.c.created_at, steps.c.key),
    "select_steps_of_run": lambda: _select(steps, STEP_COLUMNS, steps.c.run_id == bindparam("run_id")).order_by(
        steps.c.created_at, steps.c.key
    ),
    "select_events": lambda: select(events.c.seq, events.c.type, events.c.data, events.c.created_at)
    .where(and_(events.c.run_id == bindparam("run_id"), events.c.seq > bindparam("after")))
    .order_by(events.c.seq),
    "next_interjection_seq": lambda: select(func.coalesce(func.max(interjections.c.seq), 0) + 1).where(
        interjections.c.run_id == bindparam("run_id")
    ),
    "insert_interjection": _insert(interjections, ("run_id", "seq", "message", "metadata", "created_at")),
    "select_pending_interjections": lambda: select(interjections.c.seq, interjections.c.message, interjections.c.metadata)
    .where(and_(interjections.c.run_id == bindparam("run_id"), interjections.c.consumed_at.is_(None)))
    .order_by(interjections.c.seq),
    "consume_interjection": lambda: update(interjections)
    .where(
        and_(
            interjections.c.run_id == bindparam("run_id"),
            interjections.c.seq == bindparam("seq"),
            interjections.c.consumed_at.is_(None),
        )
    )
    .values(consumed_at=bindparam("now"), consumed_by=bindparam("step")),
    "renew_leases": lambda: update(steps)
    .where(and_(steps.c.holder == bindparam("holder"), steps.c.status == "running"))
    .values(lease_until=bindparam("lease_until")),
    "request_cancel": lambda: update(runs)
    .where(and_(runs.c.id == bindparam("run_id"), runs.c.status == "running"))
    .values(cancel_requested=1, updated_at=bindparam("now")),
    "take_over_run": lambda: update(runs)
    .where(
        and_(
            runs.c.id == bindparam("run_id"),
            runs.c.status == "running",
            or_(runs.c.holder.is_(None), runs.c.holder == bindparam("previous")),
        )
    )
    .values(holder=bindparam("holder"), updated_at=bindparam("now")),
}

__all__ = ["FRAME_COLUMNS", "RUN_COLUMNS", "STATEMENTS", "STEP_COLUMNS"]
