"""Statements of replay (lg_core.replay): retry reopens a finished run from a committed
checkpoint; fork copies a run's history into a new run. Both write everything in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import and_, bindparam, case, delete, null, update
from sqlalchemy.sql import ClauseElement

from lg_core.store._statement_parts import STEP_COLUMNS, insert_of, later
from lg_core.store.schema import messages, runs, steps

REPLAY_STATEMENTS: dict[str, Callable[[], ClauseElement]] = {
    # Only while the run still has the status the caller saw: two retries cannot both win.
    "reopen_run": lambda: (
        update(runs)
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
        .returning(runs.c.event_seq)
    ),
    "delete_messages_from": lambda: delete(messages).where(
        and_(messages.c.frame_id == bindparam("frame_id"), messages.c.seq >= bindparam("from_seq"))
    ),
    # Back to the outbox. ``attempts`` drops to at most 1, so the attempt limit counts afresh;
    # ``body_entered_at`` stays: an at_most_once call whose tool started reports "outcome
    # unknown" instead of running again. A model turn starts from 0: its next claim is a first
    # attempt, not a re-execution after a crash (which would announce a model_retry
    # superseding text the retried run never streamed).
    "reschedule_step": lambda: (
        update(steps)
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
            dispatch_after=later("grace"),
            relays=0,
        )
    ),
    "insert_step_copy": insert_of(steps, STEP_COLUMNS + ("dispatch_after",)),
}

__all__ = ["REPLAY_STATEMENTS"]
