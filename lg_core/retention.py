"""``prune_runs``: the retention period of a run store (``lg runs prune``).

Every run's steps, messages and events stay in the store so that it can be
inspected, retried and forked; this deletes the finished runs that are old
enough not to need that any more (see ``lg_core.store.retention`` for what is
kept). Run it from cron or a periodic job with the retention you want, e.g.
``lg runs prune --older-than 30d``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from lg_core.errors import InvocationError
from lg_core.store.records import MAX_COUNT, RUN_TERMINAL
from lg_core.store.retention import Position, PruneReport

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_HINT = "give a timedelta, a number of seconds, or text like 90m, 12h, 30d or 2w"


def parse_age(value: Any, name: str = "older_than") -> float:
    """An age in seconds: a timedelta, seconds, or ``<number><s|m|h|d|w>``; ``name`` is the argument's, for errors."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int) and not isinstance(value, bool) and value > MAX_COUNT:  # float() would overflow
        raise InvocationError(f"{name} must be an age of at most {MAX_COUNT} seconds, got {_shown(value)}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(max(value, -1))  # (a huge negative int would overflow too)
    elif isinstance(value, str) and (match := _DURATION.match(value.lower())):
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise InvocationError(f"{name} must be an age; {_HINT}, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvocationError(f"{name} must be a finite age of zero or more, got {_shown(value)}")
    return seconds


def chosen_statuses(statuses: str | Iterable[str], allowed: tuple[str, ...], refusal: str) -> tuple[str, ...]:
    """``statuses`` (one as text, or several) without repeats; InvocationError starting with
    ``refusal`` unless there is one and each is ``allowed``."""
    if not isinstance(statuses, str) and not isinstance(statuses, Iterable):
        raise InvocationError(
            f"{refusal}: statuses must be a status name or a list of them (among {', '.join(allowed)}), "
            f"got {type(statuses).__name__}"
        )
    chosen = (statuses,) if isinstance(statuses, str) else tuple(statuses)
    if not chosen or any(not isinstance(status, str) or status not in allowed for status in chosen):
        raise InvocationError(f"{refusal}: statuses must be among {', '.join(allowed)}, got {list(chosen)!r}")
    return tuple(dict.fromkeys(chosen))


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
    from lg_core.config import runtime as current_runtime

    cutoff = time.time() - parse_age(older_than)
    chosen = check_statuses(statuses)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_COUNT):
        raise InvocationError(f"limit must be an integer from 1 to {MAX_COUNT} or None, got {_shown(limit)}")
    if after is not None and not _is_position(after):
        raise InvocationError(f"after must be None or a report's resume_after (created_at, run id), got {_shown(after)}")
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


def _shown(value: Any) -> str:
    """``repr(value)`` cut short: an error message must stay one line, whatever was passed."""
    try:
        text = repr(value)
    except ValueError:  # (it holds) an int with more digits than Python prints
        return f"a value too long to print ({type(value).__name__})"
    return text if len(text) <= 80 else text[:77] + "..."


__all__ = ["PruneReport", "check_statuses", "chosen_statuses", "parse_age", "prune_runs"]
