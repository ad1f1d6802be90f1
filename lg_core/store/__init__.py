"""The run store: SQLAlchemy tables, records and the repository."""

import lg_core.store.alembic_chatter  # noqa: F401  (before anything imports alembic)
import lg_core.store.pipeline_noise  # noqa: F401  (psycopg's warning for each commit's lost race)
from lg_core.store.records import (
    ClaimedStep,
    CommitResult,
    EventRecord,
    FrameRecord,
    NewStep,
    RunFinish,
    RunRecord,
    StepCommit,
    StepRecord,
)
from lg_core.store.repository import RunStore

__all__ = [
    "ClaimedStep",
    "CommitResult",
    "EventRecord",
    "FrameRecord",
    "NewStep",
    "RunFinish",
    "RunRecord",
    "RunStore",
    "StepCommit",
    "StepRecord",
]
