"""The one clock that leases are written and judged by: the database's, on PostgreSQL.

A lease is written by the worker that claims or renews a step and judged by
whoever later looks at it: another worker's claim, the scheduler's sweeps, a
``Run.once`` caller waiting on a claim. On different hosts, each reading its
own ``time.time()``, a clock running behind writes leases that already look
expired to the others (a live step is taken away: an ``at_most_once`` tool is
then reported "outcome unknown", an idempotent step runs twice), and a clock
running ahead keeps dead leases alive for as long as it is ahead.

So on PostgreSQL every such time is computed by the server inside the
statement that writes or compares it (:func:`store_now`), and host clocks do
not matter. A SQLite store is on one host by nature (a file, or memory), so
it keeps that host's clock: there :func:`store_now` is the ``now`` parameter
every statement already takes, and its statements and values are as before.

Which times use it (columns, units and meaning unchanged: float epoch seconds):

* ``lg_steps.lease_until``: written by claims (``claim_step``,
  ``claim_and_load``), renewals (the heartbeat) and ``Run.once`` claims, and
  compared by claims, by ``Run.once`` callers and by the lease sweeper.
* ``lg_steps.dispatch_after``: when the relay re-sends a scheduled step (a
  commit's next steps, a failed attempt's retry delay, an activated session
  run, a retried run) and the lease sweeper's hold-off for a running one.
* the scheduler's "now" (:meth:`RunStore.clock`): lease expiry, and a run's
  ``deadline_at`` for ending runs no live step will end.

Times that stay the writing host's, because they only inform: ``created_at``,
``started_at``, ``finished_at`` and ``updated_at`` (a step's start and finish
come from the same host, so its duration stays right; a commit's
``finished_at`` must be exactly the value its retry compares with), events'
and messages' ``created_at``. The stall detector compares ``updated_at`` with
its own clock: it is a backstop whose mistake costs one harmless
re-announcement of a run. A step checks its run's deadline against its own
clock, as the caller's deadline is a time on the caller's clock to begin with.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement

# The server's time as epoch seconds, at the start of the statement that reads it (not of its
# transaction, which may have waited between statements). statement_timestamp() rather than
# clock_timestamp(): it is STABLE, so the planner can compare it through an index (the relay's
# range over lg_steps_open; with the VOLATILE clock_timestamp() it filters the whole outbox
# on every pass), and every use in one statement sees the same value.
POSTGRES_NOW = "CAST(EXTRACT(EPOCH FROM statement_timestamp()) AS DOUBLE PRECISION)"


class StoreNow(ColumnElement[float]):
    """The current time in epoch seconds, by the store's clock (see the module docstring)."""

    type = Float()
    inherit_cache = True


def store_now() -> StoreNow:
    """Now, by the clock leases are judged by: PostgreSQL's, or the ``now`` parameter on SQLite."""
    return StoreNow()


@compiles(StoreNow)
def _host_clock(_element: StoreNow, compiler: SQLCompiler, **kw: Any) -> str:
    # The host time the caller binds as ``now`` (one host per SQLite store).
    return compiler.process(bindparam("now", type_=Float()), **kw)


@compiles(StoreNow, "postgresql")
def _server_clock(_element: StoreNow, _compiler: SQLCompiler, **_kw: Any) -> str:
    return POSTGRES_NOW


__all__ = ["POSTGRES_NOW", "StoreNow", "store_now"]
