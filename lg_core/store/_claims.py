"""Steps' claims and leases: a worker's start of a step, the at_most_once mark, lease renewal, and
giving a failed attempt back; and reading steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from lg_core.errors import RunNotFoundError
from lg_core.store._rows import STEP_WIDTH, run_record, step_record
from lg_core.store._store_part import StorePart
from lg_core.store.records import ClaimedStep, FrameRecord, StepRecord, dumps, loads
from lg_core.store.transient_errors import retry_transient


class StepClaims(StorePart):
    """RunStore's step claims, leases and step reads."""

    @retry_transient
    def claim_step(
        self, run_id: str, key: str, holder: str, lease_seconds: float, stale_holder: str | None = None
    ) -> int | None:
        """Claim a step for ``holder`` (scheduled, lease expired, or held by the dead ``stale_holder``)
        of a run that is still running.

        Returns the attempt number this claim starts, or None when the step is not claimable.
        The lease runs ``lease_seconds`` from now by the store's clock (lg_core.store._clock).
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
        params = {
            "run_id": run_id,
            "key": key,
            "holder": holder,
            "lease_seconds": lease_seconds,
            "now": time.time(),
            "stale_holder": stale_holder or "",
        }
        guess_seq = 0 if frame_guess is None else known_messages(frame_guess)
        reads = {
            "run_id": run_id,
            "key": key,
            "holder": holder,
            "guess_frame": frame_guess or "",
            "guess_seq": guess_seq,
        }
        with self.db.transaction(pipelined=True, defer_flush=True) as tx:
            claimed = tx.submit("claim_step_of_running_run", params)
            frame_rows = tx.submit("select_claimed_frame_with_tail", reads)
            run_row = tx.submit("select_run", {"run_id": run_id}) if with_run else None
        row = claimed.one()  # PostgreSQL: the results of everything above, COMMIT included, arrive together
        if row is None:
            return self._unclaimed(run_id, key)
        step = step_record(row[:STEP_WIDTH])
        from_seq = guess_seq if step.frame_id == frame_guess else 0
        frame, tail = self._frame_with_tail(run_id, step.frame_id, frame_rows.all())
        status, cancel, interjections = row[STEP_WIDTH:]
        run_values = None if run_row is None else run_row.one()
        run = None if run_values is None else run_record(run_values)
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
        status, cancel, interjections = row[STEP_WIDTH:]
        return ClaimedStep(step_record(row[:STEP_WIDTH]), status, bool(cancel), int(interjections))

    @staticmethod
    def _frame_with_tail(run_id: str, frame_id: str, rows: list[Any]) -> tuple[FrameRecord, tuple[dict[str, Any], ...]]:
        """The frame row and the messages after the ones the caller has, from ``select_claimed_frame_with_tail``."""
        if not rows or rows[0][0] != -1:
            raise RunNotFoundError(f"no frame {frame_id!r} for run {run_id!r}")
        _seq, checkpoint, version, path, kind, entrypoint = rows[0]
        frame = FrameRecord(frame_id, run_id, path, kind, entrypoint, int(version), loads(checkpoint))
        return frame, tuple(loads(data) for _seq, data, *_nulls in rows[1:])

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
                (
                    step,
                    tx.submit(
                        "renew_lease",
                        {
                            "run_id": step[0],
                            "key": step[1],
                            "attempt": (*step, None)[2],
                            "holder": holder,
                            "lease_seconds": lease_seconds,
                            "now": now,
                        },
                    ),
                )
                for step in steps
            ]
            return [step for step, renewal in renewals if renewal.rowcount != 1]

    @retry_transient
    def release_failed_step(self, run_id: str, key: str, holder: str, error: dict[str, Any], delay: float) -> bool:
        """Give back a step whose attempt by ``holder`` raised: scheduled again, due ``delay``
        seconds from now by the store's clock (the relay sends it then), with ``error`` kept
        on the row. False when ``holder`` no longer holds it (its lease expired and another took it)."""
        params = {
            "run_id": run_id,
            "key": key,
            "holder": holder,
            "error": dumps(error),
            "now": time.time(),
            "delay": delay,
        }
        with self.db.transaction() as tx:
            return tx.execute("release_failed_step", params).rowcount == 1

    @retry_transient
    def load_step(self, run_id: str, key: str) -> StepRecord | None:
        with self.db.reader() as tx:
            row = tx.fetchone("select_step", {"run_id": run_id, "key": key})
        return None if row is None else step_record(row)

    @retry_transient
    def load_steps(self, run_id: str, *, prefix: str | None = None, open_only: bool = False) -> list[StepRecord]:
        with self.db.reader() as tx:
            if open_only:
                rows = tx.fetchall("select_open_steps", {"run_id": run_id})
            elif prefix is not None:
                pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                rows = [
                    r
                    for r in tx.fetchall("select_steps_like", {"run_id": run_id, "pattern": pattern})
                    if r[1].startswith(prefix)
                ]
            else:
                rows = tx.fetchall("select_steps_of_run", {"run_id": run_id})
        return [step_record(row) for row in rows]


__all__ = ["StepClaims"]
