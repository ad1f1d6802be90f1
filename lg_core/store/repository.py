"""RunStore: the durable source of truth for runs, one facade over the store's parts.

Public methods each open one transaction; private ``_..._txn`` helpers compose
inside it. The central write is :meth:`RunStore.commit` (lg_core.store._commits):
a step's result, its frame checkpoint (optimistic version check), new messages,
durable events and the next steps, all in one transaction, so a crash leaves
either all of a step or none of it.
"""

from __future__ import annotations

from lg_core.store._batches import Batches
from lg_core.store._claims import StepClaims
from lg_core.store._commits import StepCommits
from lg_core.store._holder_leases import HolderLeases
from lg_core.store._interjections import Interjections
from lg_core.store._once_claims import OnceClaims
from lg_core.store._recovery_scans import RecoveryScans
from lg_core.store._replay import Replays
from lg_core.store._runs import RunRows
from lg_core.store._session_runs import SessionRuns
from lg_core.store.database import DEFAULT_POOL_SIZE, Database
from lg_core.store.retention import RunRetention
from lg_core.store.statements import STATEMENTS


class RunStore(
    RunRows,
    StepCommits,
    StepClaims,
    Interjections,
    OnceClaims,
    SessionRuns,
    Batches,
    RecoveryScans,
    Replays,
    RunRetention,
    HolderLeases,
):
    """SQLAlchemy-backed run store for SQLite (memory or file) and PostgreSQL.

    Its methods live in one part per concern, each a class in its own module:
    run rows (``_runs``), step commits (``_commits``), claims and leases
    (``_claims``), interjections, ``Run.once`` claims (``_once_claims``), runs
    sharing a session (``_session_runs``), batches, the scheduler's recovery
    scans (``_recovery_scans``), replay (``_replay``), retention and the leases
    of processes holding code-mode programs (``_holder_leases``). RunStore
    combines them as base classes rather than holding one object per part:
    callers keep calling ``store.commit(...)`` or ``store.claim_step(...)``, a
    method's code is found in the part its concern names, and a part reuses the
    shared row helpers (lg_core.store._rows) without a second layer of methods
    that only forward calls. The parts share no state but what this
    constructor sets (see lg_core.store._store_part).
    """

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
        self.relay_backoff_max = relay_backoff_max  # the longest a step's re-send back-off grows (resend_backoff)
        self.db.create_schema()

    @property
    def in_memory(self) -> bool:
        return self.db.in_memory

    def close(self) -> None:
        self.db.dispose()


__all__ = ["RunStore"]
