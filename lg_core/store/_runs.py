"""Runs, their frames, messages and events: creating a run, and reading and flagging runs."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from lg_core.errors import InvocationError, RunNotFoundError
from lg_core.store._rows import (
    id_chunks,
    insert_events_txn,
    insert_messages_txn,
    insert_steps_txn,
    new_run_row,
    run_record,
)
from lg_core.store._store_part import StorePart
from lg_core.store.records import (
    START_STEP,
    EventRecord,
    FrameRecord,
    NewStep,
    RunOutcome,
    RunRecord,
    dumps,
    loads,
)
from lg_core.store.session_transactions import session_open_runs_submit
from lg_core.store.transient_errors import retry_transient
from lg_core.urls import safe_url

# How deep request_cancel follows child runs (a Graph nested in a Graph ...): deeper ones end with their parent.
_MAX_CHILD_DEPTH = 32


class RunRows(StorePart):
    """RunStore's run rows: create a run, read it back (row, frames, messages, events), flag it (cancel, holder)."""

    def create_run(
        self,
        run: dict[str, Any],
        frame: dict[str, Any],
        messages: Sequence[tuple[int, Any]],
        events: Sequence[tuple[str, dict[str, Any]]],
        new_steps: Sequence[NewStep],
        *,
        serialize: bool = False,
        now: float | None = None,
    ) -> str:
        """Persist a new run with its root frame, input messages, first events and first steps.

        With ``serialize``, a run whose session (session id and actor) already has
        a running or pending run is stored ``pending`` and its first steps wait
        outside the outbox until the runs before it end (lg_core.store.session_transactions).
        Returns the status stored: ``running`` or ``pending``.

        A try whose answer was lost after its COMMIT applied (a dropped connection)
        is tried again and finds the run: one created at exactly this call's time
        is its own, so the call succeeds instead of reporting a run that exists.
        ``now`` (default: the time now) is the run's ``created_at``, given by a caller that
        keeps it.
        """
        now = time.time() if now is None else now  # one value for every try: it marks the run row as this call's
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
        row = new_run_row(run, len(events), now)
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
                {
                    "run_id": row["id"],
                    "key": START_STEP,
                    "frame_id": frame["id"],
                    "kind": "start",
                    "status": "succeeded",
                    "attempts": 1,
                    "created_at": now,
                    "finished_at": now,
                    "checkpoint": checkpoint,
                    "event_seq": len(events),
                },
            )
            insert_messages_txn(tx, row["id"], frame["id"], messages, now)
            insert_events_txn(tx, row["id"], 1, events, now)
            step_status = "pending" if row["status"] == "pending" else "scheduled"
            insert_steps_txn(
                tx, row["id"], new_steps, now, self.relay_grace, scheduled_by=START_STEP, status=step_status
            )
        return str(row["status"])

    @retry_transient
    def append_events(self, run_id: str, events: Sequence[tuple[str, dict[str, Any]]]) -> int:
        """Append durable events outside a step commit (resume, retry, fork); returns the first seq."""
        now = time.time()
        with self.db.transaction() as tx:
            row = tx.fetchone("bump_run_any", {"run_id": run_id, "n": len(events), "now": now})
            if row is None:
                raise RunNotFoundError(f"no run with id {run_id!r}")
            first = int(row[0]) - len(events) + 1
            insert_events_txn(tx, run_id, first, events, now)
        return first

    @retry_transient
    def request_cancel(self, run_id: str) -> bool:
        """Ask a running run to stop, and with it the child runs its steps wait for, at every depth.

        A step parked on a child (a Graph node) holds no thread that could notice the
        request: the child notices it, ends cancelled, and its ending wakes the step,
        which then sees the run's own request and ends the run.
        """
        now = time.time()
        with self.db.transaction() as tx:
            if tx.execute("request_cancel", {"run_id": run_id, "now": now}).rowcount != 1:
                return False
            parents = [run_id]
            for _depth in range(_MAX_CHILD_DEPTH):
                parents = [
                    row[0]
                    for parent in parents
                    for row in tx.fetchall("request_cancel_children", {"run_id": parent, "now": now})
                ]
                if not parents:
                    break
            return True

    @retry_transient
    def take_over_run(self, run_id: str, holder: str, previous: str | None) -> bool:
        with self.db.transaction() as tx:
            cursor = tx.execute(
                "take_over_run", {"run_id": run_id, "holder": holder, "previous": previous or "", "now": time.time()}
            )
            return cursor.rowcount == 1

    @retry_transient
    def load_run(self, run_id: str) -> RunRecord:
        with self.db.reader() as tx:
            row = tx.fetchone("select_run", {"run_id": run_id})
        if row is None:
            raise RunNotFoundError(f"no run with id {run_id!r} in the run store at {safe_url(self.url)}")
        return run_record(row)

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
    def runs_finished_since(self, status: str, since: float, limit: int = 100) -> list[RunRecord]:
        """Runs with ``status`` that ended at or after ``since`` (epoch seconds), oldest first."""
        with self.db.reader() as tx:
            rows = tx.fetchall("select_runs_finished_since", {"status": status, "since": since, "limit": limit})
        return [run_record(row) for row in rows]

    @retry_transient
    def list_runs(self, status: str | None = None, limit: int = 100) -> list[RunRecord]:
        with self.db.reader() as tx:
            if status is None:
                rows = tx.fetchall("select_runs", {"limit": limit})
            else:
                rows = tx.fetchall("select_runs_by_status", {"status": status, "limit": limit})
        return [run_record(row) for row in rows]

    @retry_transient
    def list_child_runs(self, run_id: str, limit: int = 1000) -> list[RunRecord]:
        """The child runs ``run_id``'s steps started (an assembly's participants), oldest first."""
        with self.db.reader() as tx:
            rows = tx.fetchall("select_child_runs", {"run_id": run_id, "limit": limit})
        return [run_record(row) for row in rows]

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
            rows: list[tuple[str, str, str, str, str, int, str]] = tx.fetchall(
                "select_frames_of_run", {"run_id": run_id}
            )
        return [FrameRecord(*row[:6], loads(row[6])) for row in rows]

    @retry_transient
    def load_messages(self, frame_id: str, from_seq: int = 0) -> list[dict[str, Any]]:
        with self.db.reader() as tx:
            rows = tx.fetchall("select_messages", {"frame_id": frame_id, "from_seq": from_seq})
        return [loads(data) for _seq, data in rows]

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
            for params in id_chunks(run_ids):
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
            rows = [row for params in id_chunks(run_ids) for row in tx.fetchall("select_run_outcomes", params)]
        return {row[0]: RunOutcome(row[0], row[1], row[2], *(loads(value) for value in row[3:])) for row in rows}


class _RunExists(Exception):
    """Roll back a create_run whose run id is taken (maybe by an earlier try of the same call)."""


__all__ = ["RunRows"]
