"""``prune_runs``: the retention period of a run store (``lg runs prune``).

Every run's steps, messages and events stay in the store so that it can be
inspected, retried and forked; this deletes the finished runs that are old
enough not to need that any more (see ``lg_core.store.retention`` for what is
kept). Run it from cron or a periodic job with the retention you want, e.g.
``lg runs prune --older-than 30d``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from lg_core.errors import InvocationError
from lg_core.run_selection import chosen_statuses, parse_age, shown
from lg_core.runtime import current_runtime
from lg_core.store.records import MAX_COUNT, RUN_TERMINAL
from lg_core.store.retention import Position, PruneReport


def check_statuses(statuses: str | Iterable[str] | None) -> tuple[str, ...]:
    """The run statuses to prune; only finished ones can be (a running run is still needed)."""
    if statuses is None:
        return RUN_TERMINAL
    return chosen_statuses(statuses, RUN_TERMINAL, "only finished runs can be pruned")


def prune_runs(
    older_than: timedelta | float | str,
    *,
    statuses: Iterable[str] | None = None,
    dry_run: bool = False,
    limit: int | None = None,
    after: Position | None = None,
    runtime: Any = None,
) -> PruneReport:
    """Delete finished runs that finished more than ``older_than`` ago, with their steps, messages and events.

    ``statuses`` narrows it (e.g. ``["completed"]`` to keep failed runs for
    longer); ``dry_run`` counts without deleting. Runs go oldest first; ``limit``
    makes one call a bounded pass that looks at no more than that many old runs:
    when it stops early, the report's ``resume_after`` is where it stopped, and
    ``after=report.resume_after`` goes on from there (a call without ``after``
    starts from the oldest again). Runs of a batch that can still be resumed are
    kept, and sessions are untouched. Returns the counts.
    """
    cutoff = time.time() - parse_age(older_than)
    chosen = check_statuses(statuses)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_COUNT):
        raise InvocationError(f"limit must be an integer from 1 to {MAX_COUNT} or None, got {shown(limit)}")
    if after is not None and not _is_position(after):
        raise InvocationError(f"after must be None or a report's resume_after (created_at, run id), got {shown(after)}")
    store = (runtime or current_runtime()).store
    return store.prune_runs(cutoff, chosen, dry_run=dry_run, limit=limit, after=after)


def _is_position(value: Any) -> bool:
    """A ``(created_at, run id)`` pair whose time the store can compare (a huge int overflows it)."""
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], int | float)
        and not isinstance(value[0], bool)
        and (abs(value[0]) <= MAX_COUNT if isinstance(value[0], int) else math.isfinite(value[0]))
        and isinstance(value[1], str)
    )


__all__ = ["PruneReport", "check_statuses", "prune_runs"]
