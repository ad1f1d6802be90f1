"""Replay (lg_core.replay): retry reopens a finished run from a committed checkpoint; fork copies a
run's history into a new run. Each writes everything in one transaction.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from lg_core.errors import InvocationError, RunStateError
from lg_core.store._rows import (
    insert_events_txn,
    insert_messages_txn,
    insert_steps_txn,
    new_run_row,
)
from lg_core.store._statement_parts import STEP_COLUMNS
from lg_core.store._store_part import StorePart
from lg_core.store.records import NewStep, StepRecord, dumps
from lg_core.store.session_transactions import lock_session_txn, session_busy_txn
from lg_core.store.transactions import Transaction
from lg_core.store.transient_errors import retry_transient


class Replays(StorePart):
    """RunStore's retry (:meth:`reopen_run`) and fork (:meth:`copy_run`)."""

    @retry_transient
    def reopen_run(
        self,
        run_id: str,
        *,
        expected_status: str,
        invocation: dict[str, Any],
        deadline_at: float | None,
        holder: str | None,
        frame_id: str,
        frame_version: int,
        checkpoint: dict[str, Any],
        message_count: int,
        reschedule: Sequence[str],
        event: tuple[str, dict[str, Any]],
        serialize: bool = False,
        session: tuple[str, str | None] = ("", None),
    ) -> int:
        """Retry: a finished run runs again from ``checkpoint``, all in one transaction.

        The run goes back to ``running`` (terminal fields and cancel flag cleared),
        its frame to ``checkpoint`` (messages past ``message_count`` dropped), the
        ``reschedule`` steps back to the outbox with their attempts cut to at most 1, and
        ``event`` joins the log. Returns the event's sequence number; RunStateError
        when another process changed the run after the caller read it, or (with
        ``serialize``) while another run of its ``session`` (id, actor) is running
        or waiting, since runs of one session never interleave.
        """
        now = time.time()
        with self.db.transaction() as tx:
            if serialize:
                lock_session_txn(tx, *session)
                if session_busy_txn(tx, *session):
                    raise RunStateError(
                        f"another run of session {session[0]!r} is running or waiting, and runs of one session never "
                        f"interleave; retry run {run_id} after it ends"
                    )
            row = tx.fetchone(
                "reopen_run",
                {
                    "run_id": run_id,
                    "expected": expected_status,
                    "invocation": dumps(invocation),
                    "deadline_at": deadline_at,
                    "holder": holder,
                    "now": now,
                },
            )
            if row is None:
                raise RunStateError(
                    f"run {run_id!r} is no longer {expected_status}: another process retried or changed it "
                    f"meanwhile; look at it again with `lg runs show {run_id}`"
                )
            frame = {
                "frame_id": frame_id,
                "expected": frame_version,
                "version": frame_version + 1,
                "checkpoint": dumps(checkpoint),
                "now": now,
            }
            if tx.execute("update_frame", frame).rowcount != 1:
                raise RunStateError(f"frame {frame_id!r} changed while run {run_id!r} was being retried; try again")
            tx.execute("delete_messages_from", {"frame_id": frame_id, "from_seq": message_count})
            tx.executemany(
                "reschedule_step",
                [{"run_id": run_id, "key": key, "now": now, "grace": self.relay_grace} for key in reschedule],
            )
            self._unconsume_interjections_txn(tx, run_id, reschedule)
            seq = int(row[0])
            insert_events_txn(tx, run_id, seq, [event], now)
        return seq

    @staticmethod
    def _unconsume_interjections_txn(tx: Transaction, run_id: str, reschedule: Sequence[str]) -> None:
        """Interjections the failed run's ending marked consumed without reading them (the
        rescheduled steps' endings, or a run-level ending) are pending again: the retried
        turn reads them, as the run would have had it gone on."""
        given_back = tx.execute("unconsume_interjections_of_run_ending", {"run_id": run_id}).rowcount
        for key in reschedule:
            given_back += tx.execute("unconsume_interjections_of_step", {"run_id": run_id, "step": key}).rowcount
        if given_back:
            tx.execute("count_interjections", {"run_id": run_id, "delta": given_back})

    @retry_transient
    def copy_run(
        self,
        run: dict[str, Any],
        frame: dict[str, Any],
        messages: Sequence[tuple[int, Any]],
        events: Sequence[tuple[str, dict[str, Any]]],
        history: Sequence[StepRecord],
        new_steps: Sequence[NewStep],
        scheduled_by: str,
    ) -> None:
        """Fork: persist a new run built from another run's rows, all in one transaction.

        Every row is already re-keyed to the new run. ``history`` are finished
        steps, kept with their checkpoints so the fork can itself be retried or
        forked; ``new_steps`` are its open steps, as ``scheduled_by``'s commit
        scheduled them.
        """
        now = time.time()
        row = new_run_row(run, len(events), now)
        with self.db.transaction() as tx:
            if tx.fetchone("select_run_flags", {"run_id": row["id"]}) is not None:
                raise InvocationError(f"a run with id {row['id']!r} already exists; pick another run_id for the fork")
            tx.execute("insert_run", row)
            tx.execute("insert_frame", {**frame, "checkpoint": dumps(frame["checkpoint"]), "updated_at": now})
            insert_messages_txn(tx, row["id"], frame["id"], messages, now)
            insert_events_txn(tx, row["id"], 1, events, now)
            tx.executemany("insert_step_copy", [_step_copy_row(step) for step in history])
            insert_steps_txn(tx, row["id"], new_steps, now, self.relay_grace, scheduled_by=scheduled_by)


def _step_copy_row(step: StepRecord) -> dict[str, Any]:
    row = {name: getattr(step, name) for name in STEP_COLUMNS}
    for name in ("input", "result", "error", "checkpoint"):
        row[name] = None if row[name] is None else dumps(row[name])
    row["dispatch_after"] = None
    return row


__all__ = ["Replays"]
