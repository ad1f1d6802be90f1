"""What an id handed to LittleGhost may be: the one rule, checked where it comes in.

Run, session and invocation ids are 1-128 characters of letters, digits and
``. _ : @ -``, starting with a letter or digit. A new run's id is checked by
Invocation normalization, so every stored run has such an id. A look-up
(``get_run``, ``get_execution``, ``resume``, ``retry``, ``fork``, the CLI)
checks the id it is given against the same rule before asking the store: an
id no run can have is simply not found, and never reaches a database that
would refuse it with its own error (PostgreSQL rejects a NUL byte in text).
"""

from __future__ import annotations

import re
from typing import Any

from lg_core.errors import InvocationError, RunNotFoundError

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
ID_RULE = "1-128 characters of letters, digits and . _ : @ -"
_SHOWN = 80  # characters of a refused id quoted in an error message


def _shown(value: str) -> str:
    """``value`` quoted for an error message, cut to a readable length."""
    return repr(value) if len(value) <= _SHOWN else repr(value[:_SHOWN]) + f"... ({len(value)} characters)"


def run_id_to_look_up(value: Any) -> str:
    """``value`` as a run id to look up: InvocationError for a non-string, RunNotFoundError for an impossible id."""
    if not isinstance(value, str) or not value:
        raise InvocationError(f"a run id is a non-empty string (as Execution.run_id gives it), got {value!r}")
    if not ID_PATTERN.fullmatch(value):
        raise RunNotFoundError(f"no run has the id {_shown(value)}: run ids are {ID_RULE}")
    return value


__all__ = ["ID_PATTERN", "ID_RULE", "run_id_to_look_up"]
