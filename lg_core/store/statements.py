"""Named SQL statements of the run store, built with SQLAlchemy Core, by table group.

Each builder is compiled once per dialect by :class:`~lg_core.store.database.Database`
and parameters are bound by name, so SQLite and PostgreSQL share them. The
builders live in one ``_statements_*`` module per group (runs, commits, steps,
interjections, batches, recovery, replay, sessions, retention, once claims, holder leases);
``STATEMENTS`` is all of them under one name each, what a Database is given.

Lease and dispatch times are computed in the statement from
:func:`~lg_core.store._clock.store_now` (PostgreSQL's clock; the ``now``
parameter on SQLite) plus a duration parameter (``lease_seconds``, ``grace``,
``delay``), never bound as absolute host times: see lg_core.store._clock for
which times and why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sqlalchemy.sql import ClauseElement

from lg_core.store._statement_parts import STATUS_CHUNK
from lg_core.store._statements_batches import BATCH_STATEMENTS
from lg_core.store._statements_commits import COMMIT_STATEMENTS
from lg_core.store._statements_holders import HOLDER_STATEMENTS
from lg_core.store._statements_interjections import INTERJECTION_STATEMENTS
from lg_core.store._statements_once import ONCE_STATEMENTS
from lg_core.store._statements_recovery import RECOVERY_STATEMENTS
from lg_core.store._statements_replay import REPLAY_STATEMENTS
from lg_core.store._statements_retention import RETENTION_STATEMENTS
from lg_core.store._statements_runs import RUN_STATEMENTS
from lg_core.store._statements_sessions import SESSION_STATEMENTS
from lg_core.store._statements_steps import STEP_STATEMENTS

Builders = Mapping[str, Callable[[], ClauseElement]]


def _by_name(*groups: Builders) -> dict[str, Callable[[], ClauseElement]]:
    """The groups' statements in one mapping; a name two groups both define is a mistake, caught on import."""
    merged: dict[str, Callable[[], ClauseElement]] = {}
    for group in groups:
        twice = merged.keys() & group.keys()
        if twice:
            raise AssertionError(f"statements defined in two groups: {sorted(twice)}")
        merged.update(group)
    return merged


STATEMENTS = _by_name(
    RUN_STATEMENTS,
    COMMIT_STATEMENTS,
    STEP_STATEMENTS,
    INTERJECTION_STATEMENTS,
    BATCH_STATEMENTS,
    RECOVERY_STATEMENTS,
    REPLAY_STATEMENTS,
    SESSION_STATEMENTS,
    RETENTION_STATEMENTS,
    ONCE_STATEMENTS,
    HOLDER_STATEMENTS,
)

__all__ = ["STATEMENTS", "STATUS_CHUNK"]
