"""The run store: everything LittleGhost keeps durably about runs, in SQLite or PostgreSQL.

It owns the tables (runs, frames, messages, events, steps, interjections,
sessions, batches, holder leases), their migrations, the SQL run against them, and the
``RunStore`` every process reads and writes runs through. Its modules:

* ``repository`` - ``RunStore``, the facade combining the parts below
* ``_runs`` - creating runs and reading runs, frames, messages and events
* ``_commits`` - a step's commit, all of a step's effects in one transaction
* ``_claims`` - step claims, leases, the at_most_once mark and step reads
* ``_interjections`` - user messages queued for a run's next model turn
* ``_once_claims`` - ``Run.once`` keys claimed across processes
* ``_session_runs`` - starting and ending runs that wait for their session
* ``_batches`` - batch rows of ``lg batch``
* ``_recovery_scans`` - the scheduler's relay, lease sweep and stall scans
* ``_holder_leases`` - the lease of a process holding code-mode programs, readable from any host
* ``_replay`` - retrying a finished run and forking one into a new run
* ``retention`` - deleting finished runs past a cutoff
* ``_rows`` - rows to records and the inserts the parts share
* ``_store_part`` - the attributes every part reads (database, relay settings)
* ``session_transactions`` - session rows and session serialization inside transactions
* ``statements`` - every named statement, gathered from the ``_statements_*`` groups
* ``_statement_parts`` - column lists and builders the statement groups share
* ``_statements_runs`` - statements on run rows, frames, messages and events
* ``_statements_commits`` - a step commit's guarded updates and inserts
* ``_statements_steps`` - claims, leases and step reads
* ``_statements_interjections`` - queueing, consuming and reading interjections
* ``_statements_batches`` - batch rows
* ``_statements_recovery`` - the recovery scans' reads and conditional updates
* ``_statements_replay`` - reopening a run and copying steps for a fork
* ``_statements_sessions`` - session rows and runs sharing a session
* ``_statements_retention`` - deleting finished runs and batches
* ``_statements_once`` - ``Run.once`` claim rows
* ``_statements_holders`` - holder lease rows
* ``database`` - the engine, connections, and how transactions begin and end
* ``transactions`` - a transaction's cursor running compiled statements, pipelined results
* ``transient_errors`` - which errors are transient, and the retry loop around transactions
* ``store_urls`` - parsing store URLs and checking SQLite file paths
* ``outage_waits`` - readers and commits waiting out a database that is down
* ``resend_backoff`` - how long the relay and lease sweeper wait before sending a step again
* ``_clock`` - the clock leases and due times are judged by (the server's)
* ``schema`` - the tables, as SQLAlchemy metadata
* ``migrate`` - Alembic migrations of the schema (revisions in ``migrations/``)
* ``records`` - the records and commits the store reads and writes
* ``_alembic_log_filter`` - keeps Alembic's set-up lines out of every log
* ``_psycopg_log_filter`` - keeps psycopg's aborted-pipeline warning out of every log
"""

import lg_core.store._alembic_log_filter  # noqa: F401  (before anything imports alembic)
import lg_core.store._psycopg_log_filter  # noqa: F401  (psycopg's warning for each commit's lost race)
from lg_core.store.records import (
    START_STEP,
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
    "START_STEP",
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
