"""A step's commit: its result, frame checkpoint, messages, events and next steps, in one transaction.

The central write of the store: a crash leaves either all of a step or none of it.
A lost race (the run ended, another writer moved the frame, the step was already
completed) rolls back and is reported in the CommitResult.
"""

from __future__ import annotations

import time
from typing import Any

from lg_core.content import well_formed_text
from lg_core.errors import SessionActorError
from lg_core.store._rows import (
    insert_events_txn,
    insert_messages_txn,
    insert_steps_txn,
    step_record,
    step_row,
)
from lg_core.store._statement_parts import FRAME_COLUMNS, RUN_COLUMNS
from lg_core.store._store_part import StorePart
from lg_core.store.records import (
    ActivatedRun,
    CommitResult,
    SessionWrite,
    StepCommit,
    dumps,
    ended_step_status,
)
from lg_core.store.session_transactions import (
    activate_after_txn,
    activate_next_txn,
    append_session_txn,
    replace_session_txn,
    session_open_runs_submit,
)
from lg_core.store.transactions import Submitted, Transaction
from lg_core.store.transient_errors import retry_transient

DIVISION_BY_ZERO = (
    "22012"  # the SQLSTATE a failed guard of a commit made at once raises (_statements_commits._failing_without_a_row)
)


def _storable_text(text: str | None) -> str | None:
    """``text`` for a plain text column: NUL characters become U+FFFD, as lone surrogates do.

    PostgreSQL text cannot hold NUL (psycopg refuses the whole statement), so a
    model reply containing one failed the run's final commit on every attempt.
    The exact text stays in the run's messages, events and result (JSON, where
    NUL is escaped); only the ``response`` column, read back by runs loaded from
    the store, carries the replacement, the same on SQLite and PostgreSQL.
    """
    if text is None or text.isascii() and "\x00" not in text:
        return text
    return well_formed_text(text).replace("\x00", "\ufffd")


class StepCommits(StorePart):
    """RunStore's step commits (:meth:`commit`) and the ``_..._txn`` helpers they compose."""

    def commit(self, commit: StepCommit, now: float | None = None) -> CommitResult:
        """Apply one step's effects atomically; see :class:`StepCommit`.

        A commit that finishes the run (``finish``) also closes every step the run
        still has open (``ended_step_status``), whoever ends it: the step whose
        ending this is, a completion, or recovery (``step_key`` None).

        A lost race (the run already ended, another writer moved the frame, or
        the step was already completed) rolls back and is reported in the result.

        ``now`` (default: the time now) marks the step row as this commit's: a
        caller sending the same commit again after StoreUnavailableError passes
        the first call's value, so a call that was applied although its answer
        was lost is recognised as this commit's, not reported as a lost race.
        """
        now = time.time() if now is None else now  # one value for every try
        try:
            return self._commit_once(commit, now)
        except _Abort as abort:
            earlier = self._applied_by_earlier_try(commit, now)
            return CommitResult(False, abort.reason) if earlier is None else earlier

    @retry_transient
    def _applied_by_earlier_try(self, commit: StepCommit, now: float) -> CommitResult | None:
        """The result of ``commit`` if an earlier try of it was applied, else None.

        retry_transient tries a commit again when its connection failed, and it
        may fail after the database applied COMMIT (PostgreSQL restarting or
        failing over). The next try then finds its own writes and aborts (the
        frame moved, the step is finished): the step row finished at ``now``, the
        time this commit writes, says the first try is what finished it. Runs its
        commit activated are left to the outbox relay and their own polling.
        """
        if commit.step_key is None:
            return None
        with self.db.reader() as tx:
            step = tx.fetchone("select_step", {"run_id": commit.run_id, "key": commit.step_key})
            run = tx.fetchone("select_run", {"run_id": commit.run_id})
        if step is None or run is None:
            return None
        record, flags = step_record(step), dict(zip(RUN_COLUMNS, run, strict=True))
        if record.finished_at != now or record.status != commit.step_status or record.event_seq is None:
            return None
        first_seq = record.event_seq - len(commit.events) + 1
        return CommitResult(
            True, None, first_seq, bool(flags["cancel_requested"]), (), int(flags["interjections_pending"])
        )

    @retry_transient
    def _commit_once(self, commit: StepCommit, now: float) -> CommitResult:
        checkpoint = dumps(commit.checkpoint)
        if self.db.dialect_name == "postgresql" and _plain(commit) and not commit.contended:
            return self._commit_at_once(commit, checkpoint, now)
        with self.db.transaction(pipelined=True) as tx:
            # The three guarded updates go out together; their results are read in
            # order once all three have run (a failed guard rolls everything back).
            # The step row's event_seq is computed in SQL from the run row the bump
            # just updated, since the new sequence number is not known yet here.
            header_result = self._bump_run_txn(tx, commit, now)
            frame_result = self._update_frame_txn(tx, commit, checkpoint, now)
            step_result = None if commit.step_key is None else self._complete_step_txn(tx, commit, checkpoint, now)
            # A run's end may start the next run of its session: that session's lock and open
            # runs go out with the guards when the commit names the session (no round trips of their own).
            session = _session_of(commit)
            open_runs = None if commit.finish is None or session is None else session_open_runs_submit(tx, *session)
            parked = None if commit.waits_on is None else tx.submit("child_run_ended", {"child": commit.waits_on})
            header = header_result.one()
            if header is None:
                raise _Abort("run_not_running")
            last_seq, cancel_requested, interjections_pending = header
            if frame_result.rowcount != 1:
                raise _Abort("frame_version_conflict")
            if step_result is not None and step_result.rowcount != 1:
                raise _Abort("step_already_completed")
            if parked is not None:
                child = parked.one()
                if child is None or child[0] is not None:  # ended (or gone): the step reads it instead
                    raise _Abort("child_run_ended")
            insert_messages_txn(tx, commit.run_id, commit.frame_id, commit.messages, now)
            first_seq = last_seq - len(commit.events) + 1
            insert_events_txn(tx, commit.run_id, first_seq, commit.events, now)
            self._insert_new_steps_txn(tx, commit, now)
            for seq in commit.consumed_interjections:
                cursor = tx.execute(
                    "consume_interjection", {"run_id": commit.run_id, "seq": seq, "now": now, "step": commit.step_key}
                )
                if cursor.rowcount != 1:
                    raise _Abort("interjection_already_consumed")
            if commit.consumed_interjections:
                tx.execute(
                    "count_interjections", {"run_id": commit.run_id, "delta": -len(commit.consumed_interjections)}
                )
                interjections_pending -= len(commit.consumed_interjections)
            if commit.finish is not None and interjections_pending > 0:
                # A user message arrived after the step looked: finishing now would drop it.
                raise _Abort("interjection_pending")
            if commit.finish is not None:
                # A finished run has no open steps: those it leaves (parallel calls, a step whose
                # live worker must now stop, all of them when recovery ends it) close with it.
                tx.send(
                    "close_open_steps",
                    {"run_id": commit.run_id, "status": ended_step_status(commit.finish.status), "now": now},
                )
            woken: tuple[tuple[str, str, str, str], ...] = ()
            if commit.finish is not None and commit.wakes_parent:
                params = {"run_id": commit.run_id, "dispatch_delay": self.relay_grace, "now": now}
                woken = tuple((row[0], row[1], row[2], row[3]) for row in tx.fetchall("wake_parent_step", params))
            if commit.wake_at is not None and commit.step_key is not None:
                tx.send("set_wake_at", {"run_id": commit.run_id, "key": commit.step_key, "wake_at": commit.wake_at})
            for key in commit.wakes_steps:
                params = {"run_id": commit.run_id, "key": key, "dispatch_delay": self.relay_grace, "now": now}
                woken += tuple((row[0], row[1], row[2], row[3]) for row in tx.fetchall("wake_step", params))
            if commit.finish is not None and commit.cancels_children:
                tx.send("cancel_children", {"run_id": commit.run_id, "now": now})
            if commit.session is not None:
                self._append_session_txn(tx, commit.session, now)
            for snapshot in commit.session_replaces:
                messages = [m.to_dict() for m in snapshot.messages]
                replace_session_txn(
                    tx, snapshot.session_id, snapshot.actor_id, messages, snapshot.state, snapshot.metadata, now
                )
            activated: tuple[ActivatedRun, ...] = ()
            if open_runs is not None and session is not None:
                session_id, actor_id = session
                activated = tuple(activate_next_txn(tx, session_id, actor_id, now, self.relay_grace, open_runs))
            elif commit.finish is not None:
                activated = tuple(activate_after_txn(tx, commit.run_id, now, self.relay_grace))
        return CommitResult(True, None, first_seq, bool(cancel_requested), activated, interjections_pending, woken)

    def _commit_at_once(self, commit: StepCommit, checkpoint: str, now: float) -> CommitResult:
        """A plain step commit (see ``_plain``) on PostgreSQL in one round trip.

        The same guarded updates as ``_commit_once``, in their ``*_or_fail`` form:
        a guard that matches no row fails on the server, which then skips the rest
        and rolls back, so BEGIN, every statement and COMMIT go out together instead
        of the inserts waiting for the guards' results. The events are numbered in
        SQL from the run's counter the bump advanced. Which guard stopped a commit
        is read afterwards (rare: a conflict).
        """
        try:
            with self.db.transaction(pipelined=True) as tx:
                header = tx.submit("bump_run_or_fail", {"run_id": commit.run_id, "n": len(commit.events), "now": now})
                tx.send("update_frame_or_fail", self._frame_params(commit, checkpoint, now))
                if commit.step_key is not None:
                    name, params = self._step_completion(commit, checkpoint, now)
                    tx.send(f"{name}_or_fail", params)
                insert_messages_txn(tx, commit.run_id, commit.frame_id, commit.messages, now)
                last = len(commit.events) - 1
                tx.executemany(
                    "insert_numbered_events",
                    [
                        {
                            "run_id": commit.run_id,
                            "back": last - i,
                            "type": kind,
                            "data": dumps(data),
                            "created_at": now,
                        }
                        for i, (kind, data) in enumerate(commit.events)
                    ],
                )
                self._insert_new_steps_txn(tx, commit, now)
            last_seq, cancel_requested, interjections_pending, _applied = header.one()
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != DIVISION_BY_ZERO:
                raise
            raise _Abort(self._stopped_by(commit)) from None
        first_seq = last_seq - len(commit.events) + 1
        return CommitResult(True, None, first_seq, bool(cancel_requested), (), interjections_pending)

    def _stopped_by(self, commit: StepCommit) -> str:
        """Which guard a commit made at once failed on, read after it rolled back.

        Each guard, once failed, stays failed (a run does not run again, a frame's
        version only grows, a step's claim does not come back), so reading them
        later names the one that stopped it, in ``_commit_once``'s order.
        """
        with self.db.reader() as tx:
            run = tx.fetchone("select_run_flags", {"run_id": commit.run_id})
            frame = tx.fetchone("select_frame", {"frame_id": commit.frame_id})
        if run is None or run[0] != "running":
            return "run_not_running"
        if frame is None or frame[FRAME_COLUMNS.index("version")] != commit.expected_version:
            return "frame_version_conflict"
        return "step_already_completed"

    @staticmethod
    def _append_session_txn(tx: Transaction, write: SessionWrite, now: float) -> None:
        """A completed run's turn joins its session in the run's own commit (all or nothing).

        Another writer's messages, or another actor owning the session (it made the
        session while this run ran), roll the commit back as a session conflict; the
        engine then reads the session to tell the run which it was.
        """
        messages = [m.to_dict() for m in write.messages]
        try:
            stored = append_session_txn(
                tx, write.session_id, write.actor_id, messages, write.state, write.metadata, write.expected_count, now
            )
        except SessionActorError:
            raise _Abort("session_conflict") from None
        if stored is not None:
            raise _Abort("session_conflict")

    def _bump_run_txn(self, tx: Transaction, commit: StepCommit, now: float) -> Submitted:
        """Advance the run's event counter (and end it, for a finishing commit); one row or none."""
        params: dict[str, Any] = {"run_id": commit.run_id, "n": len(commit.events), "now": now}
        if commit.finish is None:
            return tx.submit("bump_run", params)
        finish = commit.finish
        params.update(
            status=finish.status,
            response=_storable_text(finish.response),
            error=None if finish.error is None else dumps(finish.error),
            usage=None if finish.usage is None else dumps(finish.usage),
            result=None if finish.result is None else dumps(finish.result),
        )
        return tx.submit("finish_run", params)

    def _update_frame_txn(self, tx: Transaction, commit: StepCommit, checkpoint: str, now: float) -> Submitted:
        """The frame's new checkpoint, only at the version the step started from (rowcount 1)."""
        return tx.submit("update_frame", self._frame_params(commit, checkpoint, now))

    @staticmethod
    def _frame_params(commit: StepCommit, checkpoint: str, now: float) -> dict[str, Any]:
        return {
            "frame_id": commit.frame_id,
            "expected": commit.expected_version,
            "version": commit.expected_version + 1,
            "checkpoint": checkpoint,
            "now": now,
        }

    def _complete_step_txn(self, tx: Transaction, commit: StepCommit, checkpoint: str, now: float) -> Submitted:
        """Finish the step (held by ``commit.holder`` when set); rowcount 1 when it applied."""
        return tx.submit(*self._step_completion(commit, checkpoint, now))

    @staticmethod
    def _step_completion(commit: StepCommit, checkpoint: str, now: float) -> tuple[str, dict[str, Any]]:
        """The statement that finishes the step (``complete_held_step`` when it has a holder) and its parameters."""
        params = {
            "run_id": commit.run_id,
            "key": commit.step_key,
            "status": commit.step_status,
            "result": None if commit.step_result is None else dumps(commit.step_result),
            "error": None if commit.step_error is None else dumps(commit.step_error),
            "checkpoint": checkpoint,
            "now": now,
        }
        if commit.holder is None:
            return "complete_step", params
        return "complete_held_step", {**params, "holder": commit.holder}

    def _insert_new_steps_txn(self, tx: Transaction, commit: StepCommit, now: float) -> None:
        """The steps a commit schedules: in the outbox, but for the one it claims (``claimed_successor``)."""
        claimed = commit.claimed_successor
        scheduled = [step for step in commit.new_steps if step.key != claimed]
        insert_steps_txn(tx, commit.run_id, scheduled, now, self.relay_grace, scheduled_by=commit.step_key)
        for step in commit.new_steps:
            if step.key == claimed:  # as a claim leaves a step: running, held, attempt 1, out of the outbox
                row = step_row(commit.run_id, step, now, commit.step_key, status="running", attempts=1)
                tx.send(
                    "insert_claimed_step",
                    {**row, "holder": commit.holder, "started_at": now, "lease_seconds": commit.lease_seconds},
                )


class _Abort(Exception):
    """Roll back a commit transaction that lost a race."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _session_of(commit: StepCommit) -> tuple[str, str | None] | None:
    """The run's ``(session_id, actor_id)`` as its row holds them, when the commit knows them: it
    names them (``run_session``) or writes the session's turn. Else None: the row is read."""
    if commit.run_session is not None:
        return commit.run_session
    return None if commit.session is None else (commit.session.session_id, commit.session.actor_id)


def _plain(commit: StepCommit) -> bool:
    """A step commit with nothing that must read before it writes: no run ending, interjection or session.

    A contended commit (``StepCommit.contended``) is plain too, but is made in two
    round trips anyway: its frame guard, read before the inserts go out, then fails
    on the client, which rolls back on a healthy connection. Made at once, a failed
    guard fails on the server, which costs the connection (Database._discard_after_error)
    and logs an ERROR: with 60 parallel calls on a turn that was about two per call.
    """
    return (
        commit.finish is None
        and not commit.consumed_interjections
        and commit.session is None
        and not commit.session_replaces
        and commit.waits_on is None
        and commit.wake_at is None
        and not commit.wakes_steps
    )


__all__ = ["StepCommits"]
