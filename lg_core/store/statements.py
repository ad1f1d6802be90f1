"""Named SQL statements of the run store, built with SQLAlchemy Core.

Each builder is compiled once per dialect by :class:`~lg_core.store.database.Database`
and parameters are bound by name, so SQLite and PostgreSQL share this file.

Lease and dispatch times are computed in the statement from :func:`store_now`
(PostgreSQL's clock; the ``now`` parameter on SQLite) plus a duration parameter
(``lease_seconds``, ``grace``, ``delay``), never bound as absolute
host times: see lg_core.store.clock for which times and why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    Float,
    Integer,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.schema import Column
from sqlalchemy.sql.selectable import Select

from lg_core.store.clock import store_now
from lg_core.store.schema import (
    batches,
    events,
    frames,
    interjections,
    messages,
    runs,
    session_messages,
    sessions,
    steps,
)


def _no_run_of_session() -> ColumnElement[bool]:
    """No run in the store (the one being pruned is already deleted) has the session ``run_id``."""
    return ~select(runs.c.id).where(runs.c.session_id == bindparam("run_id")).exists()


RUN_COLUMNS = tuple(c.name for c in runs.columns)
FRAME_COLUMNS = ("id", "run_id", "path", "kind", "entrypoint", "version", "checkpoint")
STEP_COLUMNS = (
    "run_id", "key", "frame_id", "kind", "status", "input", "result", "error",
    "attempts", "holder", "lease_until", "created_at", "started_at", "finished_at",
    "scheduled_by", "checkpoint", "event_seq", "body_entered_at",
)


BATCH_COLUMNS = tuple(c.name for c in batches.columns)
# Run statuses are polled this many ids per statement: a fixed shape compiles once
# (callers pad a short chunk by repeating an id).
STATUS_CHUNK = 16
OUTCOME_COLUMNS = ("id", "status", "response", "error", "usage", "result")  # a RunOutcome, not the invocation


def _open_step() -> ColumnElement[bool]:
    # Two comparisons rather than IN (...): IN with literals needs SQLAlchemy's
    # post-compile expansion, which the compiled-once statements skip.
    return or_(steps.c.status == "scheduled", steps.c.status == "running")


def _insert(table: object, columns: tuple[str, ...], **computed: ColumnElement[Any]) -> Callable[[], Insert]:
    """An INSERT binding ``columns`` by name, and ``computed`` columns from SQL expressions."""
    return lambda: insert(table).values({**{name: bindparam(name) for name in columns}, **computed})  # type: ignore[arg-type]


def _insert_if_absent(table: object, columns: tuple[str, ...]) -> Callable[[], ClauseElement]:
    """An INSERT of ``columns`` that does nothing when the primary key exists (row count 0).

    Built with PostgreSQL's construct, which compiles to the same ``ON CONFLICT
    DO NOTHING`` for SQLite (3.24 and later).
    """
    return lambda: postgresql.insert(table).values({name: bindparam(name) for name in columns}).on_conflict_do_nothing()  # type: ignore[arg-type]


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
            _open_step(),
        )
        if held:
            condition = and_(condition, steps.c.holder == bindparam("holder"))
        return update(steps).where(condition).values(
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
    return _insert(events, ("run_id", "type", "data", "created_at"), seq=last - bindparam("back"))().inline()


def _later(seconds: str) -> ColumnElement[float]:
    """``store_now()`` plus the duration parameter ``seconds`` (a NULL duration gives NULL)."""
    return store_now() + bindparam(seconds, type_=Float())


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
        "lease_until": _later("lease_seconds"),
        "attempts": steps.c.attempts + 1,
        "started_at": bindparam("now"),  # the claiming host's time, as the step's finished_at
        # A fresh claim may be swept as soon as it looks dead (see resweep_step).
        "dispatch_after": null(),
        # A consumer took it: the relay's back-off starts afresh (lg_core.store.relay_backoff).
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
    return (
        update(steps)
        .where(_claimable_of_running_run())
        .values(_claim_values())
        .returning(steps.c.attempts)
    )


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
        .where(and_(_held_by_holder(), steps.c.attempts == bindparam("attempt"), _of_the_run(runs.c.status) == "running"))
        .values(body_entered_at=func.coalesce(steps.c.body_entered_at, bindparam("now")))
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
        .where(and_(steps.c.run_id == bindparam("run_id"), _open_step()))
        .values(
            status=bindparam("status"),
            finished_at=bindparam("now"),
            holder=null(),
            lease_until=null(),
            dispatch_after=null(),
        )
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
    frame_id = select(steps.c.frame_id).where(_held_by_holder()).scalar_subquery()
    from_seq = case((frame_id == bindparam("guess_frame"), bindparam("guess_seq")), else_=0)
    row = select(
        literal(-1).label("seq"), frames.c.checkpoint.label("data"), frames.c.version, frames.c.path, frames.c.kind, frames.c.entrypoint
    ).where(frames.c.id == frame_id)
    tail = select(messages.c.seq, messages.c.data, null(), null(), null(), null()).where(
        and_(messages.c.frame_id == frame_id, messages.c.seq >= from_seq)
    )
    return union_all(row, tail).order_by("seq")


def _select(table: object, columns: tuple[str, ...], *conditions: ColumnElement[bool]) -> Select[*tuple[Any, ...]]:
    cols = [table.c[name] for name in columns]  # type: ignore[attr-defined]
    return select(*cols).where(and_(*conditions))


STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "insert_run": _insert(runs, RUN_COLUMNS),
    "insert_frame": _insert(frames, FRAME_COLUMNS + ("updated_at",)),
    "insert_messages": _insert(messages, ("frame_id", "seq", "run_id", "role", "data", "created_at")),
    "insert_events": _insert(events, ("run_id", "seq", "type", "data", "created_at")),
    # dispatch_delay: the relay's grace for a scheduled step, NULL for a pending one (not in the outbox yet).
    "insert_steps": _insert(
        steps,
        ("run_id", "key", "frame_id", "kind", "status", "input", "attempts", "created_at", "scheduled_by"),
        dispatch_after=_later("dispatch_delay"),
    ),
    # A successor its scheduling commit also claims, for the committing worker to run next
    # (lg_workers.continuation): as a claim leaves it, attempt 1, out of the outbox.
    "insert_claimed_step": _insert(
        steps,
        ("run_id", "key", "frame_id", "kind", "status", "input", "attempts", "created_at", "scheduled_by", "holder", "started_at"),
        lease_until=_later("lease_seconds"),
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
    "update_frame": _update_frame,
    "complete_step": _complete_step(held=False),
    "complete_held_step": _complete_step(held=True),
    # A plain step commit in one round trip (PostgreSQL: RunStore._commit_at_once).
    "bump_run_or_fail": _failing_without_a_row(_bump_run(finish=False)),
    "update_frame_or_fail": _failing_without_a_row(_update_frame, frames.c.version),
    "complete_step_or_fail": _failing_without_a_row(_complete_step(held=False), steps.c.status),
    "complete_held_step_or_fail": _failing_without_a_row(_complete_step(held=True), steps.c.status),
    "insert_numbered_events": _insert_numbered_events,
    "claim_step": _claim_step,
    "claim_step_of_running_run": _claim_step_of_running_run,
    "mark_body_entered": _mark_body_entered,
    "close_open_steps": _close_open_steps,
    "select_claimed_frame_with_tail": _claimed_frame_with_tail,
    "select_run": lambda: _select(runs, RUN_COLUMNS, runs.c.id == bindparam("run_id")),
    "select_runs": lambda: select(*runs.c).order_by(runs.c.created_at.desc()).limit(bindparam("limit")),
    "select_runs_by_status": lambda: select(*runs.c)
    .where(runs.c.status == bindparam("status"))
    .order_by(runs.c.created_at.desc())
    .limit(bindparam("limit")),
    "select_run_flags": lambda: select(runs.c.status, runs.c.cancel_requested, runs.c.holder).where(
        runs.c.id == bindparam("run_id")
    ),
    # An interjection locks the run row, so it cannot slip in while the run's final commit
    # (which updates that row) is deciding that no interjection is pending.
    "lock_run_flags": lambda: select(runs.c.status, runs.c.cancel_requested, runs.c.holder)
    .where(runs.c.id == bindparam("run_id"))
    .with_for_update(),
    "select_frame": lambda: _select(frames, FRAME_COLUMNS, frames.c.id == bindparam("frame_id")),
    "select_frames_of_run": lambda: _select(frames, FRAME_COLUMNS, frames.c.run_id == bindparam("run_id")),
    "select_messages": lambda: select(messages.c.seq, messages.c.data)
    .where(and_(messages.c.frame_id == bindparam("frame_id"), messages.c.seq >= bindparam("from_seq")))
    .order_by(messages.c.seq),
    "select_step": lambda: _select(
        steps, STEP_COLUMNS, steps.c.run_id == bindparam("run_id"), steps.c.key == bindparam("key")
    ),
    "select_step_and_run": lambda: select(
        *[steps.c[name] for name in STEP_COLUMNS], runs.c.status, runs.c.cancel_requested, runs.c.interjections_pending
    )
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
    "insert_interjection": _insert(interjections, ("run_id", "seq", "message", "metadata", "created_at", "interjection_id")),
    "find_interjection": lambda: select(interjections.c.seq, interjections.c.message).where(
        and_(interjections.c.run_id == bindparam("run_id"), interjections.c.interjection_id == bindparam("interjection_id"))
    ),
    "select_interjection": lambda: select(interjections.c.consumed_at, interjections.c.consumed_by, runs.c.status)
    .join(runs, runs.c.id == interjections.c.run_id)
    .where(and_(interjections.c.run_id == bindparam("run_id"), interjections.c.seq == bindparam("seq"))),
    "select_interjections_of_step": lambda: select(interjections.c.seq, interjections.c.interjection_id)
    .where(and_(interjections.c.run_id == bindparam("run_id"), interjections.c.consumed_by == bindparam("step")))
    .order_by(interjections.c.seq),
    "select_message": lambda: select(messages.c.data).where(
        and_(messages.c.frame_id == bindparam("frame_id"), messages.c.seq == bindparam("seq"))
    ),
    "count_interjections": lambda: update(runs)
    .where(runs.c.id == bindparam("run_id"))
    .values(interjections_pending=runs.c.interjections_pending + bindparam("delta")),
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
    # A retry gives back interjections its failed ending consumed unread: the ones the
    # ending commit of a rescheduled step took, or a run-level ending (no step) took.
    "unconsume_interjections_of_step": lambda: update(interjections)
    .where(
        and_(
            interjections.c.run_id == bindparam("run_id"),
            interjections.c.consumed_at.is_not(None),
            interjections.c.consumed_by == bindparam("step"),
        )
    )
    .values(consumed_at=None, consumed_by=None),
    "unconsume_interjections_of_run_ending": lambda: update(interjections)
    .where(
        and_(
            interjections.c.run_id == bindparam("run_id"),
            interjections.c.consumed_at.is_not(None),
            interjections.c.consumed_by.is_(None),
        )
    )
    .values(consumed_at=None),
    # Only the steps the holder is executing (Heartbeat): a claim it left behind must expire.
    # A running step, or a Run.once claim ("started"), this holder is executing; for a step,
    # the very attempt it executes (``attempt``; NULL: any), since a thread of the same process
    # (the same holder) may have claimed it again after its lease expired.
    "renew_lease": lambda: update(steps)
    .where(
        and_(
            steps.c.run_id == bindparam("run_id"),
            steps.c.key == bindparam("key"),
            or_(steps.c.status == "running", steps.c.status == "started"),
            steps.c.holder == bindparam("holder"),
            steps.c.attempts == func.coalesce(bindparam("attempt", type_=Integer()), steps.c.attempts),
        )
    )
    .values(lease_until=_later("lease_seconds")),
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
    # -- batches (lg_scheduler.batch) --
    "select_run_statuses": lambda: select(runs.c.id, runs.c.status, runs.c.holder).where(
        or_(*[runs.c.id == bindparam(f"id{i}") for i in range(STATUS_CHUNK)])
    ),
    "select_run_outcomes": lambda: _select(
        runs, OUTCOME_COLUMNS, or_(*[runs.c.id == bindparam(f"id{i}") for i in range(STATUS_CHUNK)])
    ),
    "insert_batch": _insert(batches, BATCH_COLUMNS),
    "select_batch": lambda: _select(batches, BATCH_COLUMNS, batches.c.id == bindparam("batch_id")),
    "select_batches": lambda: select(*batches.c).order_by(batches.c.created_at.desc()).limit(bindparam("limit")),
    "claim_batch": lambda: update(batches)
    .where(
        and_(
            batches.c.id == bindparam("batch_id"),
            or_(batches.c.holder.is_(None), batches.c.holder == bindparam("previous")),
        )
    )
    .values(holder=bindparam("holder"), status="running", total=bindparam("total"), updated_at=bindparam("now")),
    "update_batch": lambda: update(batches)
    .where(and_(batches.c.id == bindparam("batch_id"), batches.c.holder == bindparam("holder")))
    .values(
        completed=bindparam("completed"),
        failed=bindparam("failed"),
        invalid=bindparam("invalid"),
        running=bindparam("running"),
        status=bindparam("status"),
        holder=bindparam("next_holder"),
        updated_at=bindparam("now"),
        finished_at=bindparam("finished_at"),
    ),
}


# -- recovery (lg_scheduler.recovery) ------------------------------------------------
# Only distributed runs (no run holder) are recovered: a local run belongs to the
# process holding it, and `lg runs resume` takes it over when that process dies.


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
        .values(dispatch_after=_later("grace"), relays=steps.c.relays + 1)
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
        .values(dispatch_after=_later("delay"))
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
    return update(runs).where(and_(stalled, runs.c.id.in_(picked))).values(updated_at=bindparam("now")).returning(runs.c.id)


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


def _held_by_holder() -> ColumnElement[bool]:
    """Step ``key`` of run ``run_id``, running and still held by ``holder``."""
    return and_(
        steps.c.run_id == bindparam("run_id"),
        steps.c.key == bindparam("key"),
        steps.c.status == "running",
        steps.c.holder == bindparam("holder"),
    )


RECOVERY_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    # The time leases are judged by (lg_core.store.clock): a scheduler pass reads it once.
    "select_clock": lambda: select(store_now()),
    "relay_due_steps": _relay_due_steps,
    "push_relayed_step": _push_relayed_step,
    # Running steps not re-dispatched within their back-off, with their re-sends since their
    # claim (``relays``); the caller judges their leases.
    # Oldest lease first: a fleet may run more steps than one pass reads, and a live holder
    # renews its lease every third of it, so expired and unrenewed (dead) claims come first.
    "select_running_steps": lambda: select(*_step_columns(), steps.c.relays)
    .select_from(steps.join(runs, runs.c.id == steps.c.run_id))
    .where(and_(steps.c.status == "running", _not_swept_recently(), _distributed_running()))
    .order_by(func.coalesce(steps.c.lease_until, 0))
    .limit(bindparam("limit")),
    # Mark a dead claim as re-dispatched, due again after its back-off ``delay``: only if it is
    # still the claim and the count the caller read (one scheduler wins); the next claim clears both.
    "resweep_step": lambda: update(steps)
    .where(and_(_held_by_holder(), _not_swept_recently(), steps.c.relays == bindparam("relays")))
    .values(dispatch_after=_later("delay"), relays=steps.c.relays + 1),
    # A distributed run's open steps, each flagged when a sweep or a holder already sees to it
    # (lg_scheduler.recovery.detect_stalled): sent by the relay or the lease sweeper, which
    # back it off (``relays`` > 0), or running under a lease that has not expired.
    "select_open_steps_tracked": lambda: select(*_step_columns(), _tracked_step())
    .where(and_(steps.c.run_id == bindparam("run_id"), _open_step()))
    .order_by(steps.c.key),
    # A step whose attempt raised goes back to the outbox, due after its retry delay, with
    # the error kept for `lg runs show` and for the run's error if the attempt limit ends it.
    "release_failed_step": lambda: update(steps)
    .where(_held_by_holder())
    .values(
        status="scheduled",
        holder=null(),
        lease_until=null(),
        error=bindparam("error"),
        dispatch_after=_later("delay"),
        relays=0,
    ),
    "touch_stalled_runs": _touch_stalled_runs,
    # Distributed runs a cancel request or a passed deadline should end; pending ones too
    # once their deadline passed while they waited for their session.
    # Runs with a step under a valid lease come last: their live step ends them itself, and
    # a pass that read only those (``limit``) would end nothing while others wait.
    "select_runs_to_end": lambda: select(*runs.c)
    .where(
        or_(
            and_(_distributed_running(), or_(runs.c.cancel_requested == 1, runs.c.deadline_at < store_now())),
            and_(runs.c.status == "pending", runs.c.holder.is_(None), runs.c.deadline_at < store_now()),
        )
    )
    .order_by(case((_has_leased_step(), 1), else_=0), runs.c.created_at)
    .limit(bindparam("limit")),
}
STATEMENTS.update(RECOVERY_STATEMENTS)


# -- replay (lg_core.replay) ---------------------------------------------------------
# Retry reopens a finished run from a committed checkpoint; fork copies a run's
# history into a new run. Both write everything in one transaction.

REPLAY_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    # Only while the run still has the status the caller saw: two retries cannot both win.
    "reopen_run": lambda: update(runs)
    .where(and_(runs.c.id == bindparam("run_id"), runs.c.status == bindparam("expected")))
    .values(
        status="running",
        response=null(),
        error=null(),
        usage=null(),
        result=null(),
        finished_at=null(),
        lease_until=null(),
        cancel_requested=0,
        holder=bindparam("holder"),
        invocation=bindparam("invocation"),
        deadline_at=bindparam("deadline_at"),
        event_seq=runs.c.event_seq + 1,
        updated_at=bindparam("now"),
    )
    .returning(runs.c.event_seq),
    "delete_messages_from": lambda: delete(messages).where(
        and_(messages.c.frame_id == bindparam("frame_id"), messages.c.seq >= bindparam("from_seq"))
    ),
    # Back to the outbox. ``attempts`` drops to at most 1, so the attempt limit counts afresh;
    # ``body_entered_at`` stays: an at_most_once call whose tool started reports "outcome
    # unknown" instead of running again. A model turn starts from 0: its next claim is a first
    # attempt, not a re-execution after a crash (which would announce a model_retry
    # superseding text the retried run never streamed).
    "reschedule_step": lambda: update(steps)
    .where(and_(steps.c.run_id == bindparam("run_id"), steps.c.key == bindparam("key")))
    .values(
        status="scheduled",
        attempts=case((steps.c.kind == "model", 0), (steps.c.attempts > 1, 1), else_=steps.c.attempts),
        holder=null(),
        lease_until=null(),
        result=null(),
        error=null(),
        checkpoint=null(),
        event_seq=null(),
        started_at=null(),
        finished_at=null(),
        dispatch_after=_later("grace"),
        relays=0,
    ),
    "insert_step_copy": _insert(steps, STEP_COLUMNS + ("dispatch_after",)),
}
STATEMENTS.update(REPLAY_STATEMENTS)


# -- sessions (lg_core.sessions, lg_core.store.sessions) ------------------------------------
# A session row is keyed by (session_id, actor_key), and a session id has one row (its
# owner's: lg_sessions_owner); a run matches it through coalesce(actor_id, '') so a run
# without an actor meets the session's "" key.

SESSION_COLUMNS = tuple(c.name for c in sessions.columns)


def _session_row(table: object) -> ColumnElement[bool]:
    return and_(table.c.session_id == bindparam("session_id"), table.c.actor_key == bindparam("actor_key"))  # type: ignore[attr-defined]


def _session_runs(table: object = runs) -> ColumnElement[bool]:
    return and_(
        table.c.session_id == bindparam("session_id"),  # type: ignore[attr-defined]
        func.coalesce(table.c.actor_id, "") == bindparam("actor_key"),  # type: ignore[attr-defined]
    )


def _session_runner() -> ClauseElement:
    """The running run of a session (id and holder): what its pending runs wait for."""
    return select(runs.c.id, runs.c.holder).where(and_(_session_runs(), runs.c.status == "running")).limit(1)


def _append_session(keep_metadata: bool) -> Callable[[], ClauseElement]:
    def build() -> ClauseElement:
        values: dict[str, Any] = {"message_count": bindparam("count"), "state": bindparam("state"), "updated_at": bindparam("now")}
        if not keep_metadata:
            values["metadata"] = bindparam("metadata")
        # The expected_count check and the move happen in one UPDATE: a concurrent
        # writer either sees the old count (and waits on the row) or the new one.
        return update(sessions).where(and_(_session_row(sessions), sessions.c.message_count == bindparam("expected"))).values(values)

    return build


def _load_session() -> ClauseElement:
    """A session's row and its messages in one statement, so one snapshot (a read needs no lock).

    The row comes first with seq -1 (state in ``data``, metadata and count after it),
    then the messages below the row's count, in order.
    """
    row = select(
        literal(-1).label("seq"), sessions.c.state.label("data"), sessions.c.metadata, sessions.c.message_count
    ).where(_session_row(sessions))
    listed = (
        select(session_messages.c.seq, session_messages.c.data, null(), null())
        .select_from(
            session_messages.join(
                sessions,
                and_(
                    sessions.c.session_id == session_messages.c.session_id,
                    sessions.c.actor_key == session_messages.c.actor_key,
                    session_messages.c.seq < sessions.c.message_count,
                ),
            )
        )
        .where(_session_row(session_messages))
    )
    return union_all(row, listed).order_by("seq")


def _stalled_sessions() -> ClauseElement:
    waiting, active = runs.alias("waiting"), runs.alias("active")
    running = (
        select(active.c.id)
        .where(
            and_(
                active.c.session_id == waiting.c.session_id,
                func.coalesce(active.c.actor_id, "") == func.coalesce(waiting.c.actor_id, ""),
                active.c.status == "running",
            )
        )
        .exists()
    )
    return (
        select(waiting.c.session_id, waiting.c.actor_id)
        .where(and_(waiting.c.status == "pending", ~running))
        .group_by(waiting.c.session_id, waiting.c.actor_id)
        .limit(bindparam("limit"))
    )


SESSION_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "select_session": lambda: select(sessions.c.message_count, sessions.c.state, sessions.c.metadata).where(
        _session_row(sessions)
    ),
    "load_session": _load_session,
    "select_session_owner": lambda: select(sessions.c.actor_key).where(sessions.c.session_id == bindparam("session_id")),
    "select_session_runner": _session_runner,
    "insert_session": _insert(sessions, SESSION_COLUMNS),
    "insert_session_if_absent": _insert_if_absent(sessions, SESSION_COLUMNS),
    "append_session": _append_session(keep_metadata=False),
    "append_session_keep_metadata": _append_session(keep_metadata=True),
    "replace_session": lambda: update(sessions)
    .where(_session_row(sessions))
    .values(
        message_count=bindparam("count"),
        state=bindparam("state"),
        metadata=bindparam("metadata"),
        updated_at=bindparam("now"),
    ),
    "delete_session_messages": lambda: delete(session_messages).where(_session_row(session_messages)),
    "insert_session_messages": _insert(session_messages, ("session_id", "actor_key", "seq", "data")),
    # -- runs sharing a session: serialization ---------------------------------------
    # PostgreSQL only: one transaction at a time decides who runs next on a session.
    "lock_session": lambda: select(func.pg_advisory_xact_lock(func.hashtextextended(bindparam("lock_key"), 0))),
    "select_session_open_runs": lambda: select(runs.c.id, runs.c.status, runs.c.holder)
    .where(and_(_session_runs(), or_(runs.c.status == "running", runs.c.status == "pending")))
    .order_by(runs.c.created_at, runs.c.id),
    "select_run_session": lambda: select(runs.c.session_id, runs.c.actor_id).where(runs.c.id == bindparam("run_id")),
    "activate_run": lambda: update(runs)
    .where(and_(runs.c.id == bindparam("run_id"), runs.c.status == "pending"))
    .values(status="running", updated_at=bindparam("now")),
    "release_pending_steps": lambda: update(steps)
    .where(and_(steps.c.run_id == bindparam("run_id"), steps.c.status == "pending"))
    .values(status="scheduled", dispatch_after=_later("grace"))
    .returning(steps.c.key, steps.c.kind, steps.c.frame_id),
    "end_pending_run": lambda: update(runs)
    .where(and_(runs.c.id == bindparam("run_id"), runs.c.status == "pending"))
    .values(
        status=bindparam("status"),
        error=bindparam("error"),
        usage=bindparam("usage"),
        event_seq=runs.c.event_seq + bindparam("n"),
        holder=null(),
        updated_at=bindparam("now"),
        finished_at=bindparam("now"),
    )
    .returning(runs.c.event_seq),
    # A run ended before it started never reads its interjections: consumed by no step.
    "consume_unread_interjections": lambda: update(interjections)
    .where(and_(interjections.c.run_id == bindparam("run_id"), interjections.c.consumed_at.is_(None)))
    .values(consumed_at=bindparam("now"), consumed_by=null()),
    "end_pending_steps": lambda: update(steps)
    .where(and_(steps.c.run_id == bindparam("run_id"), steps.c.status == "pending"))
    .values(status=bindparam("status"), finished_at=bindparam("now"), dispatch_after=null()),
    "select_stalled_sessions": _stalled_sessions,
}
STATEMENTS.update(SESSION_STATEMENTS)


# -- retention (RunStore.prune_runs) -----------------------------------------------------------
def _finished_batch() -> ColumnElement[bool]:
    return and_(batches.c.status == "finished", batches.c.finished_at < bindparam("cutoff"))


# One finished run at a time, by key: the statements compile once (no IN lists) and
# each uses a primary key or lg_runs_status, never a scan of a history table.
RETENTION_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    # created_at < cutoff is implied by finished_at < cutoff and lets lg_runs_status bound the scan.
    "select_prunable_runs": lambda: select(runs.c.id, runs.c.created_at)
    .where(
        and_(
            runs.c.status == bindparam("status"),
            runs.c.created_at < bindparam("cutoff"),
            runs.c.finished_at < bindparam("cutoff"),
            # keyset pagination: the runs a pass keeps (a batch's) are not read again
            tuple_(runs.c.created_at, runs.c.id) > tuple_(bindparam("after_created"), bindparam("after_id")),
        )
    )
    .order_by(runs.c.created_at, runs.c.id)
    .limit(bindparam("limit")),
    "select_unfinished_batch_ids": lambda: select(batches.c.id).where(
        or_(batches.c.status != "finished", batches.c.finished_at >= bindparam("cutoff"))
    ),
    "delete_run_messages": lambda: delete(messages).where(
        messages.c.frame_id.in_(select(frames.c.id).where(frames.c.run_id == bindparam("run_id")).scalar_subquery())
    ),
    "delete_run_frames": lambda: delete(frames).where(frames.c.run_id == bindparam("run_id")),
    "delete_run_steps": lambda: delete(steps).where(steps.c.run_id == bindparam("run_id")),
    "delete_run_events": lambda: delete(events).where(events.c.run_id == bindparam("run_id")),
    "delete_run_interjections": lambda: delete(interjections).where(interjections.c.run_id == bindparam("run_id")),
    # A run asked without a session_id has a session of its own, keyed by the run's id; it goes
    # with the run, unless another run still in the store continues it (asked with that id).
    "delete_own_session": lambda: delete(sessions).where(and_(sessions.c.session_id == bindparam("run_id"), _no_run_of_session())),
    "delete_own_session_messages": lambda: delete(session_messages).where(
        and_(session_messages.c.session_id == bindparam("run_id"), _no_run_of_session())
    ),
    # Only while still finished: a run retried since it was selected is left alone.
    "delete_finished_run": lambda: delete(runs).where(
        and_(runs.c.id == bindparam("run_id"), runs.c.status == bindparam("status"), runs.c.finished_at < bindparam("cutoff"))
    ),
    "count_finished_batches": lambda: select(func.count()).where(_finished_batch()),
    # lg runs retry-failed: one status's runs that ended at or after a time, oldest first.
    "select_runs_finished_since": lambda: select(*runs.c)
    .where(and_(runs.c.status == bindparam("status"), runs.c.finished_at >= bindparam("since")))
    .order_by(runs.c.finished_at, runs.c.id)
    .limit(bindparam("limit")),
    "delete_finished_batches": lambda: delete(batches).where(_finished_batch()),
}
STATEMENTS.update(RETENTION_STATEMENTS)


# -- Run.once across processes (lg_core.store.once) --------------------------------------------
# A ``once/<key>`` step row is the claim: ``started`` while its holder performs the block
# (leased and renewed like a running step), ``succeeded`` once it returned.
def _started_once(holder: str) -> ColumnElement[bool]:
    return and_(
        steps.c.run_id == bindparam("run_id"),
        steps.c.key == bindparam("key"),
        steps.c.status == "started",
        steps.c.holder == bindparam(holder),
    )


def _lease_expired() -> ColumnElement[bool]:
    return or_(steps.c.lease_until.is_(None), steps.c.lease_until < store_now())


def _insert_once_claim() -> ClauseElement:
    """The ``started`` row, leased ``lease_seconds`` from now by the store's clock; returns the lease."""
    columns = ("run_id", "key", "frame_id", "kind", "status", "attempts", "holder", "created_at", "started_at")
    values: dict[str, Any] = {name: bindparam(name) for name in columns}
    return insert(steps).values({**values, "lease_until": _later("lease_seconds")}).returning(steps.c.lease_until)


ONCE_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    "insert_once_claim": _insert_once_claim,
    # The claim as a waiting caller sees it; whether its lease ran out is the store clock's call (1 or 0).
    "select_once_claim": lambda: select(
        steps.c.status, steps.c.holder, steps.c.lease_until, case((_lease_expired(), 1), else_=0)
    ).where(and_(steps.c.run_id == bindparam("run_id"), steps.c.key == bindparam("key"))),
    "finish_once": lambda: update(steps)
    .where(_started_once("holder"))
    .values(status="succeeded", finished_at=bindparam("now"), lease_until=null()),
    # The holder's block raised (it may be tried again), or the holder's process is gone.
    "drop_once_claim": lambda: delete(steps).where(_started_once("holder")),
    # The holder stopped renewing: only while its lease is still expired (by the store's clock).
    "drop_expired_once_claim": lambda: delete(steps).where(and_(_started_once("holder"), _lease_expired())),
}
STATEMENTS.update(ONCE_STATEMENTS)

__all__ = ["BATCH_COLUMNS", "FRAME_COLUMNS", "ONCE_STATEMENTS", "RECOVERY_STATEMENTS", "RETENTION_STATEMENTS", "RUN_COLUMNS", "SESSION_COLUMNS", "SESSION_STATEMENTS", "STATEMENTS", "STATUS_CHUNK", "STEP_COLUMNS"]
