"""Distributed runs with steps in the outbox, and the SQL the back-off tests read and move them by.

Shared by the relay's and the lease sweeper's back-off tests: a step is made due
by moving its ``dispatch_after`` into the past (the store's clock is
PostgreSQL's, which a test cannot move), and read back column by column.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from lg_core.store import NewStep, RunStore

MODEL_KEY = "root/turn-0/model"


def create_distributed_run(
    store: RunStore,
    run_id: str = "r1",
    steps: tuple[tuple[str, str], ...] = (("model", MODEL_KEY),),
    deadline_at: float | None = None,
    inputs: dict[str, dict[str, Any]] | None = None,
) -> None:
    """A distributed run (no holder) with scheduled steps ``(kind, key)``, as a worker's commit leaves it;
    ``inputs``: the input of the steps it names by key."""
    store.create_run(
        {
            "id": run_id,
            "entrypoint": "app:Agent",
            "kind": "agent",
            "status": "running",
            "invocation": {"message": "hi"},
            "session_id": run_id,
            "actor_id": None,
            "holder": None,
            "deadline_at": deadline_at,
        },
        {
            "id": f"{run_id}/root",
            "run_id": run_id,
            "path": "root",
            "kind": "agent",
            "entrypoint": "app:Agent",
            "version": 0,
            "checkpoint": {},
        },
        [],
        [("invocation_start", {"run_id": run_id})],
        [NewStep(key=key, frame_id=f"{run_id}/root", kind=kind, input=(inputs or {}).get(key)) for kind, key in steps],
    )


def make_due(store: RunStore, run_id: str = "r1", key: str = MODEL_KEY) -> None:
    """Move the step's ``dispatch_after`` a second before the store's clock."""
    with store.db.engine.begin() as conn:
        conn.execute(
            text("UPDATE lg_steps SET dispatch_after = :t WHERE run_id = :r AND key = :k"),
            {"t": store.clock() - 1, "r": run_id, "k": key},
        )


def step_column(store: RunStore, column: str, run_id: str = "r1", key: str = MODEL_KEY) -> Any:
    with store.db.engine.connect() as conn:
        return conn.execute(
            text(f"SELECT {column} FROM lg_steps WHERE run_id = :r AND key = :k"), {"r": run_id, "k": key}
        ).scalar()
