"""The subagent manager's bounds: how much delegated work one parent run may hold.

A parent's model chooses how much to delegate, so every dimension of it is
bounded: children working at once, identities created, turns in all, follow-ups
queued per identity, the size of a message to a child and of a child's answer
handed back. How long one progress check waits is the Agent's
``subagent_long_poll_duration``. A model that reaches a bound gets the manager's
model-facing error and the run goes on; the bounds themselves are checked when
declared, and a limit nothing would enforce is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from lg_core.errors import ConfigurationError

DEFAULT_MAX_CONCURRENT = 4
DEFAULT_MAX_IDENTITIES = 16
DEFAULT_MAX_TURNS = 64
DEFAULT_MAX_QUEUED_TURNS_PER_IDENTITY = 4
DEFAULT_MAX_MESSAGE_CHARS = 16_000
DEFAULT_MAX_RESPONSE_CHARS = 16_000
DEFAULT_WAIT_TIMEOUT = 30.0
DEFAULT_LIST_LIMIT = 20
MAX_LIST_LIMIT = 100


# Limits of the spec's manager that a parent run here has no use for, and what to do instead.
_NOT_ENFORCED = {
    "wait_timeout": "how long one wait for progress lasts is the Agent's subagent_long_poll_duration; set that",
    "close_timeout": (
        "a parent's children are runs of their own, asked to stop through the store when the parent ends and "
        "bounded by their own deadline; nothing waits for them to close, so remove it"
    ),
}


@dataclass(frozen=True, slots=True)
class ManagerLimits:
    """One parent run's bounds on delegated work (defaults above)."""

    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    max_identities: int = DEFAULT_MAX_IDENTITIES
    max_turns: int = DEFAULT_MAX_TURNS
    max_queued_turns_per_identity: int = DEFAULT_MAX_QUEUED_TURNS_PER_IDENTITY
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS
    max_response_chars: int = DEFAULT_MAX_RESPONSE_CHARS

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"subagent limit {field.name} must be a positive integer, got {value!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> ManagerLimits:
        """Limits from a declaration's mapping; an unknown name is refused, naming the known ones."""
        if values is None:
            return cls()
        if not isinstance(values, Mapping):
            raise ConfigurationError(f"subagent limits must be a mapping, got {type(values).__name__}")
        refused = sorted(set(values) & set(_NOT_ENFORCED))
        if refused:
            raise ConfigurationError(f"subagent limit {refused[0]!r} is not accepted: {_NOT_ENFORCED[refused[0]]}")
        known = {field.name for field in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigurationError(
                f"unknown subagent limit {unknown[0]!r}; the limits are {', '.join(sorted(known))}"
            )
        return replace(cls(), **values)


def positive_seconds(value: object, what: str) -> float:
    """``value`` as a float once it is a positive, finite number of seconds (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{what} must be a positive number of seconds, got {value!r}")
    return float(value)


__all__ = [
    "DEFAULT_LIST_LIMIT",
    "DEFAULT_MAX_CONCURRENT",
    "DEFAULT_MAX_IDENTITIES",
    "DEFAULT_MAX_MESSAGE_CHARS",
    "DEFAULT_MAX_QUEUED_TURNS_PER_IDENTITY",
    "DEFAULT_MAX_RESPONSE_CHARS",
    "DEFAULT_MAX_TURNS",
    "DEFAULT_WAIT_TIMEOUT",
    "MAX_LIST_LIMIT",
    "ManagerLimits",
    "positive_seconds",
]
