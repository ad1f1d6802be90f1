"""RunStore: the durable source of truth for runs.

Public methods each open one transaction; private ``_..._txn`` helpers compose
inside it. The central write is :meth:`RunStore.commit`: a step's result, its
frame checkpoint (optimistic version check), new messages, durable events and
the next steps, all in one transaction, so a crash leaves either all of a step
or none of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

from lg_core.content import well_formed_text
from lg_core.errors import InvocationError, RunNotFoundError, RunStateError, SessionActorError
from lg_core.store import once as once_claims
from lg_core.store import relay_backoff
from lg_core.store.database import (
    DEFAULT_POOL_SIZE,
    Database,
    Submitted,
    Transaction,
    retry_transient,
)
from lg_core.store.once import OnceClaim
from lg_core.store.records import (
    RUN_TERMINAL,
    STEP_OPEN,
    ActivatedRun,
    BatchRecord,
    ClaimedStep,
    CommitResult,
    EventRecord,
    FrameRecord,
    InterjectionAnswer,
    NewStep,
    RelayedStep,
    RunOutcome,
    RunRecord,
    SessionWrite,
    StepCommit,
    StepRecord,
    dumps,
    ended_step_status,
    loads,
)
from lg_core.store.retention import Position, PruneReport, prune
from lg_core.store.sessions import (
    activate_after_txn,
    activate_next_txn,
    actor_key,
    append_session_txn,
    lock_session_txn,
    session_busy_txn,
    session_open_runs_submit,
    stalled_sessions_txn,
)
from lg_core.store.statements import (
    BATCH_COLUMNS,
    FRAME_COLUMNS,
    RUN_COLUMNS,
    STATEMENTS,
    STATUS_CHUNK,
    STEP_COLUMNS,
)
from lg_core.urls import safe_url

_JSON_RUN_FIELDS = ("invocation", "error", "usage", "result", "execution_state")
_STEP_WIDTH = len(STEP_COLUMNS)  # a claim's row: the step's columns, then its run's flags
START_STEP = "root/start"
DIVISION_BY_ZERO = "22012"  # the SQLSTATE a failed guard of a commit made at once raises (statements._failing_without_a_row)


_MAX_REPLY_HOPS = 8  # reply_in links: one per repair, and a frame repairs once


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


class RunStore:
    """SQLAlchemy-backed run store for SQLite (memory or file) and PostgreSQL."""

    def __init__(
        self,
        url: str = "sqlite://",
        *,
        synchronous: str = "FULL",
        relay_grace: float = 30.0,
        relay_backoff_max: float = 300.0,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> None:
        self.db = Database(url, synchronous=synchronous, pool_size=pool_size, statements=STATEMENTS)
        self.url = url
        self.pool_size = pool_size  # a SQL session store in another database opens as many (build_session_store)
        self.relay_grace = relay_grace
        self.relay_backoff_max = relay_backoff_max  # the longest a step's relay back-off grows (relay_backoff)
        self.db.create_schema()

    @property
    def in_memory(self) -> bool:
        return self.db.in_memory

    def close(self) -> None:
        self.db.dispose()

    # -- writes -------------------------------------------------------------------

    def create_run(
        self,
        run: dict[str, Any],
        frame: dict[str, Any],
        messages: Sequence[tuple[int, Any]],
        events: Sequence[tuple[str, dict[str, Any]]],
        new_steps: Sequence[NewStep],
        *,
        serialize: bool = False,
    ) -> str:
        """Persist a new run with its root frame, input messages, first events and first steps.

        With ``serialize``, a run whose session (session id and actor) already has
        a running or pending run is stored ``pending`` and its first steps wait
        outside the outbox until the runs before it end (lg_core.store.sessions).
        Returns the status stored: ``running`` or ``pending``.

        A try whose answer was lost after its COMMIT applied (a dropped connection)
        is tried again and finds the run: one created at exactly this call's time
        is its own, so the call succeeds instead of reporting a run that exists.
        """
        now = time.time()  # one value for every try: it marks the run row as this call's
        try:
            return self._create_run_once(run, frame, messages, events, new_steps, serialize, now)
        except _RunExists:
            record = self.load_run(run["id"])
            if record.created_at == now:
                return record.status
            raise InvocationError(
                f"a run with id {run['id']!r} already exists; pick a new run_id or resume it with "
                f"lg_core.resume({run['id']!r})"
            ) from None

    @retry_transient
    def _create_run_once(
        self,
        run: dict[str, Any],
        frame: dict[str, Any],
        messages: Sequence[tuple[int, Any]],
        events: Sequence[tuple[str, dict[str, Any]]],
        new_steps: Sequence[NewStep],
        serialize: bool,
        now: float,
    ) -> str:
        row = _new_run_row(run, len(events), now)
        # Pipelined on PostgreSQL: the two checks go out with BEGIN and are read
        # together, and the inserts go out with COMMIT (2 round trips in all).
        with self.db.transaction(pipelined=True) as tx:
            existing = tx.submit("select_run_flags", {"run_id": row["id"]})
            busy = None
            if serialize and row["status"] == "running":
                busy = session_open_runs_submit(tx, row["session_id"], row["actor_id"])
            if existing.one() is not None:
                raise _RunExists
            if busy is not None and busy.one() is not None:
                row["status"] = "pending"
            checkpoint = dumps(frame["checkpoint"])
            tx.send("insert_run", row)
            tx.send("insert_frame", {**frame, "checkpoint": checkpoint, "updated_at": now})
            tx.send(
                "insert_done_step",
                {"run_id": row["id"], "key": START_STEP, "frame_id": frame["id"], "kind": "start", "status": "succeeded",
                 "attempts": 1, "created_at": now, "finished_at": now, "checkpoint": checkpoint, "event_seq": len(events)},
            )
            self._insert_messages_txn(tx, row["id"], frame["id"], messages, now)
            self._insert_events_txn(tx, row["id"], 1, events, now)
            step_status = "pending" if row["status"] == "pending" else "scheduled"
            self._insert_steps_txn(tx, row["id"], new_steps, now, scheduled_by=START_STEP, status=step_status)
        return str(row["status"])

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
        record, flags = _step_record(step), dict(zip(RUN_COLUMNS, run, strict=True))
        if record.finished_at != now or record.status != commit.step_status or record.event_seq is None:
            return None
        first_seq = record.event_seq - len(commit.events) + 1
        return CommitResult(True, None, first_seq, bool(flags["cancel_requested"]), (), int(flags["interjections_pending"]))

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
            header = header_result.one()
            if header is None:
                raise _Abort("run_not_running")
            last_seq, cancel_requested, interjections_pending = header
            if frame_result.rowcount != 1:
                raise _Abort("frame_version_conflict")
            if step_result is not None and step_result.rowcount != 1:
                raise _Abort("step_already_completed")
            self._insert_messages_txn(tx, commit.run_id, commit.frame_id, commit.messages, now)
            first_seq = last_seq - len(commit.events) + 1
            self._insert_events_txn(tx, commit.run_id, first_seq, commit.events, now)
            self._insert_new_steps_txn(tx, commit, now)
            for seq in commit.consumed_interjections:
                cursor = tx.execute("consume_interjection", {"run_id": commit.run_id, "seq": seq, "now": now, "step": commit.step_key})
                if cursor.rowcount != 1:
                    raise _Abort("interjection_already_consumed")
            if commit.consumed_interjections:
                tx.execute("count_interjections", {"run_id": commit.run_id, "delta": -len(commit.consumed_interjections)})
                interjections_pending -= len(commit.consumed_interjections)
            if commit.finish is not None and interjections_pending > 0:
                # A user message arrived after the step looked: finishing now would drop it.
                raise _Abort("interjection_pending")
            if commit.finish is not None:
                # A finished run has no open steps: those it leaves (parallel calls, a step whose
                # live worker must now stop, all of them when recovery ends it) close with it.
                tx.send("close_open_steps", {"run_id": commit.run_id, "status": ended_step_status(commit.finish.status), "now": now})
            if commit.session is not None:
                self._append_session_txn(tx, commit.session, now)
            activated: tuple[ActivatedRun, ...] = ()
            if open_runs is not None and session is not None:
                session_id, actor_id = session
                activated = tuple(activate_next_txn(tx, session_id, actor_id, now, self.relay_grace, open_runs))
            elif commit.finish is not None:
                activated = tuple(activate_after_txn(tx, commit.run_id, now, self.relay_grace))
        return CommitResult(True, None, first_seq, bool(cancel_requested), activated, interjections_pending)

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
                self._insert_messages_txn(tx, commit.run_id, commit.frame_id, commit.messages, now)
                last = len(commit.events) - 1
                tx.executemany(
                    "insert_numbered_events",
                    [
                        {"run_id": commit.run_id, "back": last - i, "type": kind, "data": dumps(data), "created_at": now}
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

    @staticmethod
    def _insert_messages_txn(tx: Transaction, run_id: str, frame_id: str, rows: Iterable[tuple[int, Any]], now: float) -> None:
        tx.executemany(
            "insert_messages",
            [
                {"frame_id": frame_id, "seq": seq, "run_id": run_id, "role": m.role, "data": dumps(m.stored_form()), "created_at": now}
                for seq, m in rows
            ],
        )

    @staticmethod
    def _insert_events_txn(
        tx: Transaction, run_id: str, first_seq: int, rows: Sequence[tuple[str, dict[str, Any]]], now: float
    ) -> None:
        tx.executemany(
            "insert_events",
            [
                {"run_id": run_id, "seq": first_seq + i, "type": kind, "data": dumps(data), "created_at": now}
                for i, (kind, data) in enumerate(rows)
            ],
        )

    def _insert_new_steps_txn(self, tx: Transaction, commit: StepCommit, now: float) -> None:
        """The steps a commit schedules: in the outbox, but for the one it claims (``claimed_successor``)."""
        claimed = commit.claimed_successor
        scheduled = [step for step in commit.new_steps if step.key != claimed]
        self._insert_steps_txn(tx, commit.run_id, scheduled, now, scheduled_by=commit.step_key)
        for step in commit.new_steps:
            if step.key == claimed:  # as a claim leaves a step: running, held, attempt 1, out of the outbox
                row = _step_row(commit.run_id, step, now, commit.step_key, status="running", attempts=1)
                tx.send("insert_claimed_step", {**row, "holder": commit.holder, "started_at": now,
                                                "lease_seconds": commit.lease_seconds})

    def _insert_steps_txn(
        self,
        tx: Transaction,
        run_id: str,
        rows: Sequence[NewStep],
        now: float,
        scheduled_by: str | None = None,
        status: str = "scheduled",
    ) -> None:
        tx.executemany(
            "insert_steps",
            [
                {
                    **_step_row(run_id, step, now, scheduled_by, status=status, attempts=0),
                    # Due for the relay a grace from now by the store's clock; a pending step is
                    # not in the outbox yet (NULL: activation sets its dispatch_after).
                    "dispatch_delay": self.relay_grace if status == "scheduled" else None,
                }
                for step in rows
            ],
        )

    @retry_transient
    def claim_step(
        self, run_id: str, key: str, holder: str, lease_seconds: float, stale_holder: str | None = None
    ) -> int | None:
        """Claim a step for ``holder`` (scheduled, lease expired, or held by the dead ``stale_holder``)
        of a run that is still running.

        Returns the attempt number this claim starts, or None when the step is not claimable.
        The lease runs ``lease_seconds`` from now by the store's clock (lg_core.store.clock).
        """
        with self.db.transaction() as tx:
            cursor = tx.execute(
                "claim_step",
                {
                    "run_id": run_id,
                    "key": key,
                    "holder": holder,
                    "lease_seconds": lease_seconds,
                    "now": time.time(),
                    "stale_holder": stale_holder or "",
                },
            )
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    @retry_transient
    def claim_and_load(
        self,
        run_id: str,
        key: str,
        holder: str,
        lease_seconds: float,
        *,
        stale_holder: str | None = None,
        known_messages: Callable[[str], int] = lambda _frame_id: 0,
        frame_guess: str | None = None,
        with_run: bool = False,
    ) -> ClaimedStep:
        """A worker's start of a step in one transaction: claim it and read its frame.

        The claim follows :meth:`claim_step`'s rules and also needs the run to be
        running. Claimed, the result carries the step as claimed, the run's cancel
        flag and pending interjections, the frame row and its messages after the
        ``known_messages(frame_guess)`` the caller has cached (the frame is the
        claimed step's; when it is not ``frame_guess``, all its messages are read).
        Not claimed, it carries the step and run as they stand (read afterwards),
        so the caller can tell a missing, finished or live-held step from a dead
        holder's (and claim again with ``stale_holder``). ``with_run`` adds the
        run's row, for a worker that has not rebuilt the run yet. Pipelined on
        PostgreSQL, BEGIN, the claim, the reads and COMMIT go out together: one
        round trip.

        On PostgreSQL the claim is flushed like every commit. The database server
        can crash while its clients live on: a claim lost there would let the step
        look scheduled again while its first holder is still running it, so the
        relay would send it to a second worker, the first holder's result could no
        longer commit (its claim is gone), and the step's attempts would count one
        execution fewer than ran (tests/chaos/test_postgres_crash.py).

        On a SQLite file store the claim commits without waiting for its fsync
        (``defer_flush``): it survives any killed process at once, and only a power
        loss, which also ends every holder on that host, can lose it. An
        ``at_most_once`` call relies on no claim either way: what a later attempt
        decides by is the mark the attempt writes, flushed, right before the tool
        runs (:meth:`mark_body_entered`).
        """
        params = {"run_id": run_id, "key": key, "holder": holder, "lease_seconds": lease_seconds, "now": time.time(),
                  "stale_holder": stale_holder or ""}
        guess_seq = 0 if frame_guess is None else known_messages(frame_guess)
        reads = {"run_id": run_id, "key": key, "holder": holder, "guess_frame": frame_guess or "", "guess_seq": guess_seq}
        with self.db.transaction(pipelined=True, defer_flush=True) as tx:
            claimed = tx.submit("claim_step_of_running_run", params)
            frame_rows = tx.submit("select_claimed_frame_with_tail", reads)
            run_row = tx.submit("select_run", {"run_id": run_id}) if with_run else None
        row = claimed.one()  # PostgreSQL: the results of everything above, COMMIT included, arrive together
        if row is None:
            return self._unclaimed(run_id, key)
        step = _step_record(row[:_STEP_WIDTH])
        from_seq = guess_seq if step.frame_id == frame_guess else 0
        frame, tail = self._frame_with_tail(run_id, step.frame_id, frame_rows.all())
        status, cancel, interjections = row[_STEP_WIDTH:]
        run_values = None if run_row is None else run_row.one()
        run = None if run_values is None else _run_record(run_values)
        return ClaimedStep(step, status, bool(cancel), int(interjections), step.attempts, frame, from_seq, tail, run)

    @retry_transient
    def mark_body_entered(self, run_id: str, key: str, holder: str, attempt: int) -> bool:
        """Record, durably, that attempt ``attempt`` of step ``key`` enters its at_most_once tool.

        Committed with its flush (never ``defer_flush`` or relaxed durability) before the
        tool runs, so no crash can lose it once the tool may have started: a later attempt
        that finds it reports "outcome unknown" (lg_core.engine.at_most_once). False, with
        nothing written, when ``holder`` no longer holds that attempt or the run has ended:
        the caller must not call the tool.
        """
        params = {"run_id": run_id, "key": key, "holder": holder, "attempt": attempt, "now": time.time()}
        with self.db.transaction() as tx:
            return tx.execute("mark_body_entered", params).rowcount == 1

    def _unclaimed(self, run_id: str, key: str) -> ClaimedStep:
        """A failed claim's result: the step and its run's flags as they stand now, or nothing (no such step).

        Read after the claim's transaction (a rare path, so the claim does not carry the
        read): the state can only have moved on since (the holder finished or gave the
        step back, the run ended), and the caller's answer to that state is as right.
        """
        with self.db.reader() as tx:
            row = tx.fetchone("select_step_and_run", {"run_id": run_id, "key": key})
        if row is None:
            return ClaimedStep(None)
        status, cancel, interjections = row[_STEP_WIDTH:]
        return ClaimedStep(_step_record(row[:_STEP_WIDTH]), status, bool(cancel), int(interjections))

    @staticmethod
    def _frame_with_tail(run_id: str, frame_id: str, rows: list[Any]) -> tuple[FrameRecord, tuple[dict[str, Any], ...]]:
        """The frame row and the messages after the ones the caller has, from ``select_claimed_frame_with_tail``."""
        if not rows or rows[0][0] != -1:
            raise RunNotFoundError(f"no frame {frame_id!r} for run {run_id!r}")
        _seq, checkpoint, version, path, kind, entrypoint = rows[0]
        frame = FrameRecord(frame_id, run_id, path, kind, entrypoint, int(version), loads(checkpoint))
        return frame, tuple(loads(data) for _seq, data, *_nulls in rows[1:])

    @retry_transient
    def append_events(self, run_id: str, events: Sequence[tuple[str, dict[str, Any]]]) -> int:
        """Append durable events outside a step commit (resume, retry, fork); returns the first seq."""
        now = time.time()
        with self.db.transaction() as tx:
            row = tx.fetchone("bump_run_any", {"run_id": run_id, "n": len(events), "now": now})
            if row is None:
                raise RunNotFoundError(f"no run with id {run_id!r}")
            first = int(row[0]) - len(events) + 1
            self._insert_events_txn(tx, run_id, first, events, now)
        return first

    def claim_once(self, run_id: str, key: str, holder: str, lease_seconds: float) -> OnceClaim:
        """Claim ``Run.once``'s ``key`` for ``holder``, or say who holds it (lg_core.store.once)."""
        return once_claims.claim(self.db, run_id, key, holder, lease_seconds)

    def look_once(self, run_id: str, key: str) -> OnceClaim | None:
        """The ``Run.once`` claim on ``key`` as it stands (``done`` or ``held``), None when free."""
        return once_claims.look(self.db, run_id, key)

    def finish_once(self, run_id: str, key: str, holder: str) -> bool:
        return once_claims.finish(self.db, run_id, key, holder)

    def drop_once(self, run_id: str, key: str, holder: str | None, *, expired_only: bool = False) -> bool:
        return once_claims.drop(self.db, run_id, key, holder, expired_only=expired_only)

    @retry_transient
    def add_interjection(
        self, run_id: str, message: dict[str, Any], metadata: dict[str, Any] | None = None, interjection_id: str | None = None
    ) -> int:
        """Queue a user message for the run's next model turn; returns its sequence number.

        ``interjection_id`` makes the call idempotent: the same id again (a web
        request retried after a lost response) returns the first call's number and
        adds nothing, even once the run has finished; the same id with another
        message raises InvocationError. The run row's lock serializes the check.
        """
        with self.db.transaction() as tx:
            flags = tx.fetchone("lock_run_flags", {"run_id": run_id})
            if flags is None:
                raise RunNotFoundError(f"no run with id {run_id!r}")
            if interjection_id is not None:
                earlier = tx.fetchone("find_interjection", {"run_id": run_id, "interjection_id": interjection_id})
                if earlier is not None:
                    return _same_interjection(run_id, interjection_id, earlier, message)
            if flags[0] not in ("running", "pending") or flags[1]:
                from lg_core.errors import AgentInterjectionError

                state = f"has finished ({flags[0]})" if flags[0] not in ("running", "pending") else "is being cancelled"
                raise AgentInterjectionError(f"run {run_id} {state}; it cannot accept an interjection")
            seq = int(tx.fetchone("next_interjection_seq", {"run_id": run_id})[0])
            tx.execute("count_interjections", {"run_id": run_id, "delta": 1})
            tx.execute(
                "insert_interjection",
                {"run_id": run_id, "seq": seq, "message": dumps(message), "metadata": dumps(metadata or {}),
                 "created_at": time.time(), "interjection_id": interjection_id},
            )
        return seq

    @retry_transient
    def pending_interjections(self, run_id: str) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
        with self.db.reader() as tx:
            rows = tx.fetchall("select_pending_interjections", {"run_id": run_id})
        return [(seq, loads(message), loads(metadata) or {}) for seq, message, metadata in rows]

    @retry_transient
    def interjection_answer(self, run_id: str, seq: int) -> InterjectionAnswer:
        """Has a model turn answered interjection ``seq``? Its reply, when one has.

        A model turn consumes interjections in its commit, which records its reply
        message's number in the step result (``reply_message``). A turn whose
        answer was rejected for repair (an invalid structured result) names the
        turn that answers instead (``reply_in``), and this follows it. An ending
        consumes the interjections it will never read and records neither.
        """
        with self.db.reader() as tx:
            row = tx.fetchone("select_interjection", {"run_id": run_id, "seq": seq})
            if row is None:
                raise RunNotFoundError(f"run {run_id!r} has no interjection number {seq}")
            consumed_at, reader_key, run_status = row
            if consumed_at is None:
                # A finished run never reads it (every ending marks its unread ones consumed,
                # so this only guards rows an older version left behind).
                return InterjectionAnswer("unanswered" if run_status in RUN_TERMINAL else "pending")
            step, key = None, reader_key
            for _hop in range(_MAX_REPLY_HOPS):
                found = None if key is None else tx.fetchone("select_step", {"run_id": run_id, "key": key})
                step = None if found is None else _step_record(found)
                result = step.result if step is not None and isinstance(step.result, dict) else {}
                if step is None or "reply_in" not in result or step.status != "succeeded":
                    break
                key = result["reply_in"]
            if step is not None and step.status in STEP_OPEN:
                return InterjectionAnswer("unanswered" if run_status in RUN_TERMINAL else "pending")
            reply = result.get("reply_message") if step is not None and step.status == "succeeded" else None
            if reply is None:
                return InterjectionAnswer("unanswered", step=key)
            # A reply is only read from a step (above), so ``step`` is not None here.
            message = tx.fetchone("select_message", {"frame_id": cast(StepRecord, step).frame_id, "seq": reply})
            read = tx.fetchall("select_interjections_of_step", {"run_id": run_id, "step": reader_key})
        return InterjectionAnswer(
            "answered",
            step=key,
            message=None if message is None else loads(message[0]),
            numbers=tuple(int(number) for number, _id in read),
            interjection_ids=tuple(given for _number, given in read if given is not None),
            tool_calls=bool(result.get("tool_calls")),
        )

    @retry_transient
    def renew_leases(
        self, holder: str, lease_seconds: float, steps: Sequence[tuple[str, str] | tuple[str, str, int | None]]
    ) -> list[tuple[Any, ...]]:
        """Extend ``holder``'s leases on ``steps`` ((run id, key) pairs, or (run id, key, attempt) for
        one attempt of a step), those it still holds running, to ``lease_seconds`` from now by the
        store's clock. Returns the ones it no longer holds (another worker, or another thread of
        this process, claimed them after their lease expired; or they ended)."""
        return self.renew_leases_once(holder, lease_seconds, steps)

    def renew_leases_once(
        self, holder: str, lease_seconds: float, steps: Sequence[tuple[str, str] | tuple[str, str, int | None]]
    ) -> list[tuple[Any, ...]]:
        """:meth:`renew_leases` in one try, raising the driver's error: for a step's own check between
        streamed chunks, which must not stall the step for the retries' seconds (lg_core.engine.leases)."""
        now = time.time()
        # One statement per step for its row count; pipelined on PostgreSQL, so one round trip for all.
        with self.db.transaction(pipelined=True) as tx:
            renewals = [
                (step, tx.submit("renew_lease", {"run_id": step[0], "key": step[1], "attempt": (*step, None)[2],
                                                 "holder": holder, "lease_seconds": lease_seconds, "now": now}))
                for step in steps
            ]
            return [step for step, renewal in renewals if renewal.rowcount != 1]

    @retry_transient
    def request_cancel(self, run_id: str) -> bool:
        with self.db.transaction() as tx:
            return tx.execute("request_cancel", {"run_id": run_id, "now": time.time()}).rowcount == 1

    @retry_transient
    def take_over_run(self, run_id: str, holder: str, previous: str | None) -> bool:
        with self.db.transaction() as tx:
            cursor = tx.execute(
                "take_over_run", {"run_id": run_id, "holder": holder, "previous": previous or "", "now": time.time()}
            )
            return cursor.rowcount == 1

    # -- reads --------------------------------------------------------------------

    @retry_transient
    def load_run(self, run_id: str) -> RunRecord:
        with self.db.reader() as tx:
            row = tx.fetchone("select_run", {"run_id": run_id})
        if row is None:
            raise RunNotFoundError(f"no run with id {run_id!r} in the run store at {safe_url(self.url)}")
        return _run_record(row)

    @retry_transient
    def run_flags(self, run_id: str) -> tuple[str, bool, str | None]:
        """The run's status, whether a cancel was requested, and its holder."""
        return self.run_flags_once(run_id)

    def run_flags_once(self, run_id: str) -> tuple[str, bool, str | None]:
        """:meth:`run_flags` in one try, raising the driver's error: for a poll that the next poll
        repeats anyway (a step's cancel check between streamed chunks), which must neither stall
        its step for the retries' seconds nor fail it while the store is out of reach."""
        with self.db.reader() as tx:
            row = tx.fetchone("select_run_flags", {"run_id": run_id})
        if row is None:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        return row[0], bool(row[1]), row[2]

    @retry_transient
    def prune_runs(
        self,
        cutoff: float,
        statuses: Sequence[str] = RUN_TERMINAL,
        *,
        dry_run: bool = False,
        limit: int | None = None,
        after: Position | None = None,
    ) -> PruneReport:
        """Delete finished runs that finished before ``cutoff`` (epoch seconds), oldest first; ``limit``
        bounds one pass and ``after`` resumes one (see lg_core.store.retention)."""
        return prune(self.db, cutoff, statuses, dry_run=dry_run, limit=limit, after=after)

    @retry_transient
    def runs_finished_since(self, status: str, since: float, limit: int = 100) -> list[RunRecord]:
        """Runs with ``status`` that ended at or after ``since`` (epoch seconds), oldest first."""
        with self.db.reader() as tx:
            rows = tx.fetchall("select_runs_finished_since", {"status": status, "since": since, "limit": limit})
        return [_run_record(row) for row in rows]

    @retry_transient
    def list_runs(self, status: str | None = None, limit: int = 100) -> list[RunRecord]:
        with self.db.reader() as tx:
            if status is None:
                rows = tx.fetchall("select_runs", {"limit": limit})
            else:
                rows = tx.fetchall("select_runs_by_status", {"status": status, "limit": limit})
        return [_run_record(row) for row in rows]

    @retry_transient
    def load_frame(self, frame_id: str) -> FrameRecord:
        with self.db.reader() as tx:
            row: tuple[str, str, str, str, str, int, str] | None = tx.fetchone("select_frame", {"frame_id": frame_id})
        if row is None:
            raise RunNotFoundError(f"no frame {frame_id!r}")
        return FrameRecord(*row[:6], loads(row[6]))

    @retry_transient
    def load_frames(self, run_id: str) -> list[FrameRecord]:
        with self.db.reader() as tx:
            rows: list[tuple[str, str, str, str, str, int, str]] = tx.fetchall("select_frames_of_run", {"run_id": run_id})
        return [FrameRecord(*row[:6], loads(row[6])) for row in rows]

    @retry_transient
    def load_messages(self, frame_id: str, from_seq: int = 0) -> list[dict[str, Any]]:
        with self.db.reader() as tx:
            rows = tx.fetchall("select_messages", {"frame_id": frame_id, "from_seq": from_seq})
        return [loads(data) for _seq, data in rows]

    @retry_transient
    def load_step(self, run_id: str, key: str) -> StepRecord | None:
        with self.db.reader() as tx:
            row = tx.fetchone("select_step", {"run_id": run_id, "key": key})
        return None if row is None else _step_record(row)

    @retry_transient
    def load_steps(self, run_id: str, *, prefix: str | None = None, open_only: bool = False) -> list[StepRecord]:
        with self.db.reader() as tx:
            if open_only:
                rows = tx.fetchall("select_open_steps", {"run_id": run_id})
            elif prefix is not None:
                pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                rows = [r for r in tx.fetchall("select_steps_like", {"run_id": run_id, "pattern": pattern}) if r[1].startswith(prefix)]
            else:
                rows = tx.fetchall("select_steps_of_run", {"run_id": run_id})
        return [_step_record(row) for row in rows]

    @retry_transient
    def load_events(self, run_id: str, after: int = 0) -> list[EventRecord]:
        with self.db.reader() as tx:
            rows = tx.fetchall("select_events", {"run_id": run_id, "after": after})
        return [EventRecord(run_id, seq, kind, loads(data), created) for seq, kind, data, created in rows]

    @retry_transient
    def run_statuses(self, run_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """``{run_id: (status, holder)}`` for the ids that exist (a batch polls its runs with this)."""
        found: dict[str, tuple[str, str | None]] = {}
        with self.db.reader() as tx:
            for params in _id_chunks(run_ids):
                for run_id, status, holder in tx.fetchall("select_run_statuses", params):
                    found[run_id] = (status, holder)
        return found

    @retry_transient
    def run_outcomes(self, run_ids: Sequence[str]) -> dict[str, RunOutcome]:
        """``{run_id: outcome}`` for the ids that exist: one statement per 16 runs, not one per run.

        A batch writes its finished items' result lines from these; a resumed batch
        of 100,000 finished items reads them in 6,250 statements, not 100,000, and
        without the invocations.
        """
        with self.db.reader() as tx:
            rows = [row for params in _id_chunks(run_ids) for row in tx.fetchall("select_run_outcomes", params)]
        return {row[0]: RunOutcome(row[0], row[1], row[2], *(loads(value) for value in row[3:])) for row in rows}

    # -- runs sharing a session (lg_core.store.sessions) --------------------------------

    @retry_transient
    def activate_next_pending(self, session_id: str, actor_id: str | None) -> list[ActivatedRun]:
        """Start the session's oldest pending run if none of its runs is running.

        A run's finishing commit does this itself; call it for sessions whose
        last run ended some other way (see :meth:`stalled_sessions`). Safe to
        call at any time and from several processes: it activates nothing while
        a run of the session is running. Use ``Engine.activate_next_pending`` to
        also hand the activated steps to their executors.
        """
        with self.db.transaction() as tx:
            return activate_next_txn(tx, session_id, actor_id, time.time(), self.relay_grace)

    @retry_transient
    def stalled_sessions(self, limit: int = 100) -> list[tuple[str, str | None]]:
        """``(session_id, actor_id)`` of sessions with a pending run but no running one."""
        with self.db.reader() as tx:
            return stalled_sessions_txn(tx, limit)

    @retry_transient
    def session_runner(self, session_id: str, actor_id: str | None) -> tuple[str, str | None] | None:
        """``(run_id, holder)`` of the session's running run, if one runs (holder None: on workers)."""
        with self.db.reader() as tx:
            row = tx.fetchone("select_session_runner", {"session_id": session_id, "actor_key": actor_key(actor_id)})
        return None if row is None else (row[0], row[1])

    @retry_transient
    def end_pending_run(
        self, run_id: str, status: str, error: dict[str, Any] | None, usage: dict[str, Any], events: Sequence[tuple[str, dict[str, Any]]]
    ) -> int | None:
        """End a run that never started (e.g. cancelled while waiting for its session).

        Returns the first seq of ``events``, or None when the run is no longer pending.
        """
        now = time.time()
        with self.db.transaction() as tx:
            params = {"run_id": run_id, "status": status, "error": None if error is None else dumps(error),
                      "usage": dumps(usage), "n": len(events), "now": now}
            row = tx.fetchone("end_pending_run", params)
            if row is None:
                return None
            first = int(row[0]) - len(events) + 1
            self._insert_events_txn(tx, run_id, first, events, now)
            tx.execute("end_pending_steps", {"run_id": run_id, "status": ended_step_status(status), "now": now})
            unread = tx.execute("consume_unread_interjections", {"run_id": run_id, "now": now}).rowcount
            if unread:
                tx.execute("count_interjections", {"run_id": run_id, "delta": -unread})
        return first

    # -- batches (lg_scheduler.batch) ----------------------------------------------

    @retry_transient
    def open_batch(self, batch: dict[str, Any]) -> tuple[BatchRecord, bool]:
        """Insert a batch row (id, agent, input_hash, input_path, total, holder) unless it exists.

        Returns the stored row and whether this call created it.
        """
        now = time.time()
        with self.db.transaction() as tx:
            row = tx.fetchone("select_batch", {"batch_id": batch["id"]})
            if row is not None:
                return BatchRecord(*row), False
            values: dict[str, Any] = {name: None for name in BATCH_COLUMNS}
            values.update(batch, status="running", completed=0, failed=0, invalid=0, running=0, created_at=now, updated_at=now)
            tx.execute("insert_batch", values)
        return BatchRecord(**values), True

    @retry_transient
    def claim_batch(self, batch_id: str, holder: str, previous: str | None, total: int) -> bool:
        """Make ``holder`` the batch's submitter if it has none or ``previous`` had it."""
        with self.db.transaction() as tx:
            params = {"batch_id": batch_id, "holder": holder, "previous": previous or "", "total": total, "now": time.time()}
            return tx.execute("claim_batch", params).rowcount == 1

    @retry_transient
    def update_batch(
        self, batch_id: str, holder: str, counts: dict[str, int], *, finished: bool = False, release: bool = False
    ) -> bool:
        """Record the submitter's counts (completed, failed, invalid, running); only while it holds the batch."""
        now = time.time()
        params = {
            "batch_id": batch_id,
            "holder": holder,
            **{name: int(counts.get(name, 0)) for name in ("completed", "failed", "invalid", "running")},
            "status": "finished" if finished else "running",
            "next_holder": None if finished or release else holder,
            "now": now,
            "finished_at": now if finished else None,
        }
        with self.db.transaction() as tx:
            return tx.execute("update_batch", params).rowcount == 1

    @retry_transient
    def load_batch(self, batch_id: str) -> BatchRecord | None:
        with self.db.reader() as tx:
            row = tx.fetchone("select_batch", {"batch_id": batch_id})
        return None if row is None else BatchRecord(*row)

    @retry_transient
    def list_batches(self, limit: int = 20) -> list[BatchRecord]:
        with self.db.reader() as tx:
            rows = tx.fetchall("select_batches", {"limit": limit})
        return [BatchRecord(*row) for row in rows]

    # -- recovery (lg_scheduler.recovery) ------------------------------------------------
    # Each write is conditional, so several schedulers may run these at once: the
    # loser of a race simply gets nothing back.

    @retry_transient
    def relay_due_steps(self, limit: int = 500) -> list[RelayedStep]:
        """Scheduled steps of running distributed runs whose ``dispatch_after`` passed, with their back-off.

        Each one's ``dispatch_after`` moves ahead by its back-off delay in the same
        transaction (a grace, doubling with each send nobody consumed, at most
        ``relay_backoff_max``: lg_core.store.relay_backoff), so the caller owns
        re-sending them until then. Due and ahead are by the store's clock
        (lg_core.store.clock), whichever host's messages these were.
        """
        grace, cap = self.relay_grace, self.relay_backoff_max
        with self.db.transaction() as tx:
            rows = tx.fetchall("relay_due_steps", {"now": time.time(), "grace": grace, "limit": limit})
            sends = [(_step_record(row[:-1]), int(row[-1])) for row in rows]
            relayed = [_relayed_step(step, count, grace, cap) for step, count in sends]
            further = [
                {"run_id": step.run_id, "key": step.key, "relays": count, "delay": item.delay, "now": time.time()}
                for (step, count), item in zip(sends, relayed, strict=True)
                if item.delay > grace  # the UPDATE pushed it one grace: the rest of its back-off
            ]
            if further:
                tx.executemany("push_relayed_step", further)
        return relayed

    @retry_transient
    def clock(self) -> float:
        """Now, by the clock leases are written and judged by (epoch seconds): the PostgreSQL
        server's, or this host's for a SQLite store (lg_core.store.clock). The scheduler reads
        it once per pass to tell expired leases and passed deadlines."""
        with self.db.reader() as tx:
            return float(tx.fetchone("select_clock", {"now": time.time()})[0])

    @retry_transient
    def running_steps(self, limit: int = 1000) -> list[tuple[StepRecord, int]]:
        """Running steps of running distributed runs, except those re-dispatched within their back-off,
        each with its ``relays``: the lease sweeper's re-sends of it since its last claim."""
        with self.db.reader() as tx:
            rows = tx.fetchall("select_running_steps", {"now": time.time(), "limit": limit})
        return [(_step_record(row[:-1]), int(row[-1])) for row in rows]

    @retry_transient
    def mark_redispatched(self, step: StepRecord, relays: int, hold_off: float) -> RelayedStep | None:
        """Record that the dead claim of ``step`` (read with its ``relays``) is re-sent now, and its back-off.

        The first re-send after a claim delivers the step and is due again a
        ``hold_off`` later; each later one is a miss, and the wait doubles up to
        ``relay_backoff_max`` (lg_core.store.relay_backoff, with ``hold_off`` as
        the grace). None when the step changed since it was read (claimed, ended,
        or re-sent by another scheduler): the caller must not send it.
        """
        item = _relayed_step(step, relays + 1, hold_off, self.relay_backoff_max)
        params = {
            "run_id": step.run_id,
            "key": step.key,
            "holder": step.holder or "",
            "relays": relays,
            "now": time.time(),
            "delay": item.delay,
        }
        with self.db.transaction() as tx:
            return item if tx.execute("resweep_step", params).rowcount == 1 else None

    @retry_transient
    def open_steps_tracked(self, run_id: str) -> list[tuple[StepRecord, bool]]:
        """A run's open steps, each with whether a sweep or a holder already sees to it.

        Tracked: sent by the outbox relay or the lease sweeper, which back it off
        (``relays`` > 0), or running under a lease that has not expired (by the
        store's clock). The stall detector re-sends only the others.
        """
        with self.db.reader() as tx:
            rows = tx.fetchall("select_open_steps_tracked", {"run_id": run_id, "now": time.time()})
        return [(_step_record(row[:-1]), bool(row[-1])) for row in rows]

    @retry_transient
    def release_failed_step(self, run_id: str, key: str, holder: str, error: dict[str, Any], delay: float) -> bool:
        """Give back a step whose attempt by ``holder`` raised: scheduled again, due ``delay``
        seconds from now by the store's clock (the relay sends it then), with ``error`` kept
        on the row. False when ``holder`` no longer holds it (its lease expired and another took it)."""
        params = {"run_id": run_id, "key": key, "holder": holder, "error": dumps(error), "now": time.time(), "delay": delay}
        with self.db.transaction() as tx:
            return tx.execute("release_failed_step", params).rowcount == 1

    @retry_transient
    def touch_stalled_runs(self, stall_seconds: float, limit: int = 500) -> list[str]:
        """Ids of at most ``limit`` running distributed runs with no commit for ``stall_seconds``
        (the longest quiet first); each is touched so it waits again."""
        now = time.time()
        with self.db.transaction() as tx:
            rows = tx.fetchall("touch_stalled_runs", {"now": now, "cutoff": now - stall_seconds, "limit": limit})
        return [row[0] for row in rows]

    @retry_transient
    def runs_to_end(self, limit: int = 500) -> list[RunRecord]:
        """Distributed runs to end: running with a cancel request or a passed deadline (by the store's
        clock), or pending past it."""
        with self.db.reader() as tx:
            rows = tx.fetchall("select_runs_to_end", {"now": time.time(), "limit": limit})
        return [_run_record(row) for row in rows]

    # -- replay (lg_core.replay) ----------------------------------------------------

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
                {"run_id": run_id, "expected": expected_status, "invocation": dumps(invocation),
                 "deadline_at": deadline_at, "holder": holder, "now": now},
            )
            if row is None:
                raise RunStateError(
                    f"run {run_id!r} is no longer {expected_status}: another process retried or changed it "
                    f"meanwhile; look at it again with `lg runs show {run_id}`"
                )
            frame = {"frame_id": frame_id, "expected": frame_version, "version": frame_version + 1,
                     "checkpoint": dumps(checkpoint), "now": now}
            if tx.execute("update_frame", frame).rowcount != 1:
                raise RunStateError(f"frame {frame_id!r} changed while run {run_id!r} was being retried; try again")
            tx.execute("delete_messages_from", {"frame_id": frame_id, "from_seq": message_count})
            tx.executemany(
                "reschedule_step",
                [{"run_id": run_id, "key": key, "now": now, "grace": self.relay_grace} for key in reschedule],
            )
            self._unconsume_interjections_txn(tx, run_id, reschedule)
            seq = int(row[0])
            self._insert_events_txn(tx, run_id, seq, [event], now)
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
        row = _new_run_row(run, len(events), now)
        with self.db.transaction() as tx:
            if tx.fetchone("select_run_flags", {"run_id": row["id"]}) is not None:
                raise InvocationError(f"a run with id {row['id']!r} already exists; pick another run_id for the fork")
            tx.execute("insert_run", row)
            tx.execute("insert_frame", {**frame, "checkpoint": dumps(frame["checkpoint"]), "updated_at": now})
            self._insert_messages_txn(tx, row["id"], frame["id"], messages, now)
            self._insert_events_txn(tx, row["id"], 1, events, now)
            tx.executemany("insert_step_copy", [_step_copy_row(step) for step in history])
            self._insert_steps_txn(tx, row["id"], new_steps, now, scheduled_by=scheduled_by)


class _RunExists(Exception):
    """Roll back a create_run whose run id is taken (maybe by an earlier try of the same call)."""


class _Abort(Exception):
    """Roll back a commit transaction that lost a race."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _same_interjection(run_id: str, interjection_id: str, earlier: Sequence[Any], message: dict[str, Any]) -> int:
    """The earlier interjection's number, when it carried the same message."""
    seq, stored = earlier
    if loads(stored) != loads(dumps(message)):
        raise InvocationError(
            f"interjection id {interjection_id!r} of run {run_id} was used for another message; "
            "an interjection id names one message (use a new id for a new message)"
        )
    return int(seq)


def _new_run_row(run: dict[str, Any], event_count: int, now: float) -> dict[str, Any]:
    """The lg_runs row of a new run (created or forked) with ``event_count`` first events."""
    row: dict[str, Any] = {name: None for name in RUN_COLUMNS}
    row.update(run, event_seq=event_count, cancel_requested=0, interjections_pending=0, created_at=now, updated_at=now)
    for name in _JSON_RUN_FIELDS:
        if row[name] is not None:
            row[name] = dumps(row[name])
    return row


def _id_chunks(run_ids: Sequence[str]) -> Iterator[dict[str, str]]:
    """Parameters of the fixed-shape ``id0 .. id15`` statements for ``run_ids`` (a short chunk padded)."""
    ids = list(dict.fromkeys(run_ids))
    for start in range(0, len(ids), STATUS_CHUNK):
        chunk = ids[start : start + STATUS_CHUNK]
        chunk += [chunk[0]] * (STATUS_CHUNK - len(chunk))
        yield {f"id{i}": v for i, v in enumerate(chunk)}


def _run_record(row: Sequence[Any]) -> RunRecord:
    data = dict(zip(RUN_COLUMNS, row, strict=True))
    for name in _JSON_RUN_FIELDS:
        data[name] = loads(data[name])
    data["cancel_requested"] = bool(data["cancel_requested"])
    return RunRecord(**data)


def _step_copy_row(step: StepRecord) -> dict[str, Any]:
    row = {name: getattr(step, name) for name in STEP_COLUMNS}
    for name in ("input", "result", "error", "checkpoint"):
        row[name] = None if row[name] is None else dumps(row[name])
    row["dispatch_after"] = None
    return row


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
    return commit.finish is None and not commit.consumed_interjections and commit.session is None


def _relayed_step(step: StepRecord, sends: int, grace: float, cap: float) -> RelayedStep:
    missed = relay_backoff.misses(sends, step)
    return RelayedStep(
        step,
        missed,
        relay_backoff.delay(missed, grace, cap),
        relay_backoff.waited(missed, grace, cap),
        relay_backoff.new_level(missed, grace, cap),
    )


def _step_row(run_id: str, step: NewStep, now: float, scheduled_by: str | None, *, status: str, attempts: int) -> dict[str, Any]:
    """The columns every inserted step row has (``now`` also feeds the store clock's expressions)."""
    return {
        "run_id": run_id,
        "key": step.key,
        "frame_id": step.frame_id,
        "kind": step.kind,
        "status": status,
        "input": None if step.input is None else dumps(step.input),
        "attempts": attempts,
        "now": now,
        "created_at": now,
        "scheduled_by": scheduled_by,
    }


def _step_record(row: Sequence[Any]) -> StepRecord:
    (run_id, key, frame_id, kind, status, input_, result, error, attempts, holder, lease, created, started, finished,
     scheduled_by, checkpoint, event_seq, body_entered_at) = row
    return StepRecord(
        run_id, key, frame_id, kind, status, loads(input_), loads(result), loads(error),
        attempts, holder, lease, created, started, finished, scheduled_by, loads(checkpoint), event_seq,
        body_entered_at,
    )


__all__ = ["RunStore"]
