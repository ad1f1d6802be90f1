"""Rows and records: turning store rows into records and back, and the inserts every writer shares.

A run's creation, a step's commit and a fork all insert messages, events and
steps the same way; these helpers take the open transaction and never commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from lg_core.store._statement_parts import RUN_COLUMNS, STATUS_CHUNK, STEP_COLUMNS
from lg_core.store.records import NewStep, RunRecord, StepRecord, dumps, loads
from lg_core.store.transactions import Transaction

_JSON_RUN_FIELDS = ("invocation", "error", "usage", "result", "execution_state")
STEP_WIDTH = len(STEP_COLUMNS)  # a claim's row: the step's columns, then its run's flags


def new_run_row(run: dict[str, Any], event_count: int, now: float) -> dict[str, Any]:
    """The lg_runs row of a new run (created or forked) with ``event_count`` first events."""
    row: dict[str, Any] = {name: None for name in RUN_COLUMNS}
    row.update(run, event_seq=event_count, cancel_requested=0, interjections_pending=0, created_at=now, updated_at=now)
    for name in _JSON_RUN_FIELDS:
        if row[name] is not None:
            row[name] = dumps(row[name])
    return row


def id_chunks(run_ids: Sequence[str]) -> Iterator[dict[str, str]]:
    """Parameters of the fixed-shape ``id0 .. id15`` statements for ``run_ids`` (a short chunk padded)."""
    ids = list(dict.fromkeys(run_ids))
    for start in range(0, len(ids), STATUS_CHUNK):
        chunk = ids[start : start + STATUS_CHUNK]
        chunk += [chunk[0]] * (STATUS_CHUNK - len(chunk))
        yield {f"id{i}": v for i, v in enumerate(chunk)}


def run_record(row: Sequence[Any]) -> RunRecord:
    data = dict(zip(RUN_COLUMNS, row, strict=True))
    for name in _JSON_RUN_FIELDS:
        data[name] = loads(data[name])
    data["cancel_requested"] = bool(data["cancel_requested"])
    return RunRecord(**data)


def step_record(row: Sequence[Any]) -> StepRecord:
    (
        run_id,
        key,
        frame_id,
        kind,
        status,
        input_,
        result,
        error,
        attempts,
        holder,
        lease,
        created,
        started,
        finished,
        scheduled_by,
        checkpoint,
        event_seq,
        body_entered_at,
    ) = row
    return StepRecord(
        run_id,
        key,
        frame_id,
        kind,
        status,
        loads(input_),
        loads(result),
        loads(error),
        attempts,
        holder,
        lease,
        created,
        started,
        finished,
        scheduled_by,
        loads(checkpoint),
        event_seq,
        body_entered_at,
    )


def step_row(
    run_id: str, step: NewStep, now: float, scheduled_by: str | None, *, status: str, attempts: int
) -> dict[str, Any]:
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


def insert_messages_txn(
    tx: Transaction, run_id: str, frame_id: str, rows: Iterable[tuple[int, Any]], now: float
) -> None:
    tx.executemany(
        "insert_messages",
        [
            {
                "frame_id": frame_id,
                "seq": seq,
                "run_id": run_id,
                "role": m.role,
                "data": dumps(m.stored_form()),
                "created_at": now,
            }
            for seq, m in rows
        ],
    )


def insert_events_txn(
    tx: Transaction, run_id: str, first_seq: int, rows: Sequence[tuple[str, dict[str, Any]]], now: float
) -> None:
    tx.executemany(
        "insert_events",
        [
            {"run_id": run_id, "seq": first_seq + i, "type": kind, "data": dumps(data), "created_at": now}
            for i, (kind, data) in enumerate(rows)
        ],
    )


def insert_steps_txn(
    tx: Transaction,
    run_id: str,
    rows: Sequence[NewStep],
    now: float,
    relay_grace: float,
    scheduled_by: str | None = None,
    status: str = "scheduled",
) -> None:
    tx.executemany(
        "insert_steps",
        [
            {
                **step_row(run_id, step, now, scheduled_by, status=status, attempts=0),
                # Due for the relay a grace from now by the store's clock; a pending step is
                # not in the outbox yet (NULL: activation sets its dispatch_after).
                "dispatch_delay": relay_grace if status == "scheduled" else None,
            }
            for step in rows
        ],
    )


__all__ = [
    "STEP_WIDTH",
    "id_chunks",
    "insert_events_txn",
    "insert_messages_txn",
    "insert_steps_txn",
    "new_run_row",
    "run_record",
    "step_record",
    "step_row",
]
