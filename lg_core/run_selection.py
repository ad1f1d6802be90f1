"""Parsing the arguments that pick stored runs: an age (``older_than``, ``since``) and a set of
run statuses, shared by retention, replay and their command-line forms and checked the same
way everywhere, so ``--older-than 30d`` and ``prune_runs(older_than="30d")`` agree."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from lg_core.errors import InvocationError
from lg_core.store.records import MAX_COUNT

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_HINT = "give a timedelta, a number of seconds, or text like 90m, 12h, 30d or 2w"


def parse_age(value: Any, name: str = "older_than") -> float:
    """An age in seconds: a timedelta, seconds, or ``<number><s|m|h|d|w>``; ``name`` is the argument's, for errors."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int) and not isinstance(value, bool) and value > MAX_COUNT:  # float() would overflow
        raise InvocationError(f"{name} must be an age of at most {MAX_COUNT} seconds, got {shown(value)}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(max(value, -1))  # (a huge negative int would overflow too)
    elif isinstance(value, str) and (match := _DURATION.match(value.lower())):
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise InvocationError(f"{name} must be an age; {_HINT}, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvocationError(f"{name} must be a finite age of zero or more, got {shown(value)}")
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


def shown(value: Any) -> str:
    """``repr(value)`` cut short: an error message must stay one line, whatever was passed."""
    try:
        text = repr(value)
    except ValueError:  # (it holds) an int with more digits than Python prints
        return f"a value too long to print ({type(value).__name__})"
    return text if len(text) <= 80 else text[:77] + "..."


__all__ = ["chosen_statuses", "parse_age", "shown"]
