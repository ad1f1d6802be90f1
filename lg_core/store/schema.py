"""Every table of the run store, in one place (SQLAlchemy Core).

    runs      one row per top-level run: status, invocation, terminal result,
              the per-run event sequence counter, cancel flag, lease holder.
    frames    one row per active conversation (agent loop, later workflow,
              graph, swarm, subagent): its checkpoint and optimistic version.
    steps     one row per model turn / tool call, keyed by a deterministic
              key. A row in status ``scheduled`` is also the transactional
              outbox entry for "run this step": it is written in the same
              transaction as the state change that decided it. A finished row
              keeps the frame checkpoint and event count its commit produced
              and the key of the step that scheduled it, which is what retry
              and fork replay from (a run's first row is ``root/start``).
    messages  append-only conversation rows per frame; a checkpoint write
              appends O(new messages) and never rewrites history.
    events    the durable event log per run, gapless ``seq`` from runs.event_seq.
    interjections  user messages added to a running run; the next model turn
              consumes them in its commit.
    batches   one row per ``lg batch submit`` batch: its agent, input hash,
              item counts and the submitting process, so ``lg batch status``
              shows progress from any process (lg_scheduler.batch).
    sessions, session_messages  conversations shared by runs with one
              session id and actor (lg_core.sessions.SqlSessionStore).
    holder_leases  one row per process that holds code-mode programs: a lease
              it renews while it holds any, so any host can tell that process
              is gone (lg_core.store._holder_leases).

Composite-key tables are WITHOUT ROWID on SQLite (one b-tree per insert
instead of two), and indexes avoid columns that every step commit changes, so
a commit touches as few pages as possible: one fsync writes them all.

Stored JSON carries format versions (messages). Schema changes are Alembic
migrations (``lg_core/store/migrations``, applied by ``lg_core.store.migrate``):
change this module, then add a revision with ``python -m lg_core.store.migrate
revision "what changed"``.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

runs = Table(
    "lg_runs",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("entrypoint", String(300), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("status", String(20), nullable=False),
    Column("invocation", Text, nullable=False),
    Column("session_id", String(128), nullable=False),
    Column("actor_id", String(128)),
    Column("holder", String(200)),
    Column("lease_until", Float),
    Column("deadline_at", Float),
    Column("cancel_requested", Integer, nullable=False, default=0),
    Column("event_seq", Integer, nullable=False, default=0),
    # Interjections added and not yet consumed: lets a model turn skip reading
    # lg_interjections when there are none (the common case) and lets the final
    # commit refuse to finish over one that arrived late, without a query.
    Column("interjections_pending", Integer, nullable=False, default=0),
    Column("response", Text),
    Column("error", Text),
    Column("usage", Text),
    Column("result", Text),
    Column("parent_run_id", String(128)),
    # The step of ``parent_run_id`` that runs this run as its child and parks until it ends
    # (a Graph node): the commit ending this run wakes that step (lg_core.store._commits).
    Column("parent_step_key", String(300)),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("execution_state", Text),  # the ExecutionState its run captured (JSON), lg_core.execution_state
)
# created_at, not updated_at: the index must not change on every step commit.
Index("lg_runs_status", runs.c.status, runs.c.created_at)
# A parent run's children: a parent's ending cancels those still running.
Index("lg_runs_parent", runs.c.parent_run_id)

frames = Table(
    "lg_frames",
    metadata,
    Column("id", String(200), primary_key=True),
    Column("run_id", String(128), nullable=False, index=True),
    Column("path", String(200), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("entrypoint", String(300), nullable=False),
    Column("version", Integer, nullable=False),
    Column("checkpoint", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)

steps = Table(
    "lg_steps",
    metadata,
    Column("run_id", String(128), primary_key=True),
    Column("key", String(300), primary_key=True),
    Column("frame_id", String(200), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("status", String(20), nullable=False),
    Column("input", Text),
    Column("result", Text),
    Column("error", Text),
    Column("attempts", Integer, nullable=False, default=0),
    Column("holder", String(200)),
    Column("lease_until", Float),
    Column("dispatch_after", Float),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    Column("scheduled_by", String(300)),
    Column("checkpoint", Text),
    Column("event_seq", Integer),
    # Times the outbox relay sent this step since it last entered the outbox or was claimed:
    # its back-off level, so a step nobody consumes is re-sent ever more rarely, not every
    # grace (lg_core.store.resend_backoff). A claim resets it.
    Column("relays", Integer, nullable=False, server_default="0"),
    # When an attempt of an at_most_once tool call entered the tool's own code (written,
    # flushed, just before it runs): a later attempt that finds it reports "outcome
    # unknown" instead of calling the tool again (lg_core.engine._at_most_once).
    Column("body_entered_at", Float),
    # When a parked step with no child run to wake it (a subagent wait) is woken by the scheduler.
    Column("wake_at", Float),
    sqlite_with_rowid=False,
)
# Only open steps have dispatch_after (a finished step clears it), so this
# partial index holds just the outbox: small, and untouched by most history.
Index(
    "lg_steps_open",
    steps.c.dispatch_after,
    sqlite_where=steps.c.dispatch_after.isnot(None),
    postgresql_where=steps.c.dispatch_after.isnot(None),
)
# Only parked steps with a timer have wake_at: the scheduler's wake_timed_steps reads just those.
Index(
    "lg_steps_wake_at",
    steps.c.wake_at,
    sqlite_where=steps.c.wake_at.isnot(None),
    postgresql_where=steps.c.wake_at.isnot(None),
)

messages = Table(
    "lg_messages",
    metadata,
    Column("frame_id", String(200), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("run_id", String(128), nullable=False),
    Column("role", String(20), nullable=False),
    Column("data", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    sqlite_with_rowid=False,
)

events = Table(
    "lg_events",
    metadata,
    Column("run_id", String(128), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("type", String(40), nullable=False),
    Column("data", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    sqlite_with_rowid=False,
)

interjections = Table(
    "lg_interjections",
    metadata,
    Column("run_id", String(128), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("message", Text, nullable=False),
    Column("metadata", Text),
    Column("created_at", Float, nullable=False),
    Column("consumed_at", Float),
    Column("consumed_by", String(300)),
    # The caller's idempotency key: the same id again returns the first row's seq.
    Column("interjection_id", String(128)),
    sqlite_with_rowid=False,
)

batches = Table(
    "lg_batches",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("agent", String(300), nullable=False),
    Column("input_hash", String(64), nullable=False),
    Column("input_path", Text),
    Column("status", String(20), nullable=False),
    Column("total", Integer, nullable=False),
    Column("completed", Integer, nullable=False, default=0),
    Column("failed", Integer, nullable=False, default=0),
    Column("invalid", Integer, nullable=False, default=0),
    Column("running", Integer, nullable=False, default=0),
    Column("holder", String(200)),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("finished_at", Float),
)

# -- sessions (lg_core.sessions) ---------------------------------------------------------------
#   sessions          one row per session id, with the actor that owns it: message count,
#                     state, metadata. The count is what an append's expected_count is
#                     checked against, in the same UPDATE that moves it (SqlSessionStore).
#   session_messages  the session's conversation, append-only except for a replace.
# ``actor_key`` is the actor id, or "" for none, so the key is never NULL. It stays in the
# primary key, so every read and write names the owner; lg_sessions_owner (unique by session
# id) is what leaves one owner when two actors race to create a session.
# lg_runs_session finds a session's running and pending runs: runs sharing a
# session are serialized (a run started while another is active waits as
# ``pending``; the finishing run's commit activates the next one).
Index("lg_runs_session", runs.c.session_id, runs.c.status)

sessions = Table(
    "lg_sessions",
    metadata,
    Column("session_id", String(128), primary_key=True),
    Column("actor_key", String(128), primary_key=True),
    Column("message_count", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("metadata", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    sqlite_with_rowid=False,
)
Index("lg_sessions_owner", sessions.c.session_id, unique=True)

session_messages = Table(
    "lg_session_messages",
    metadata,
    Column("session_id", String(128), primary_key=True),
    Column("actor_key", String(128), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("data", Text, nullable=False),
    sqlite_with_rowid=False,
)

# -- holder leases (lg_core.store._holder_leases) ----------------------------------------------
# A process holding code-mode programs renews its row's lease; the scheduler reads it to tell
# whether a ``wait`` sent to that process's own queue will ever be consumed.
holder_leases = Table(
    "lg_holder_leases",
    metadata,
    Column("holder", String(200), primary_key=True),
    Column("lease_until", Float, nullable=False),
    sqlite_with_rowid=False,
)

__all__ = [
    "batches",
    "events",
    "frames",
    "holder_leases",
    "interjections",
    "messages",
    "metadata",
    "runs",
    "session_messages",
    "sessions",
    "steps",
]
