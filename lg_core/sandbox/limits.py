"""Sandbox limits: file-operation sizes, output capture and the resources a child may use.

Every limit is positive. The process limits (CPU seconds, sampled memory, file size,
process count) are the Sandbox's ceiling: a single call may ask for less, never for
more (:meth:`Limits.narrowed`), so code handed a Sandbox cannot lift its bounds.
``None`` means the Sandbox sets no bound of that kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from lg_core.errors import PolicyError

PROCESS_LIMIT_NAMES = ("cpu_seconds", "memory_bytes", "file_bytes", "processes")


@dataclass(frozen=True)
class Limits:
    """Bounds applied by a Sandbox's file operations and to its child processes."""

    list_entries: int = 1_000
    output_bytes: int = 1_000_000
    read_bytes: int = 1_000_000
    write_bytes: int = 1_000_000
    cpu_seconds: int | None = None
    memory_bytes: int | None = None
    file_bytes: int | None = None
    processes: int | None = None

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if value is None and field.name in PROCESS_LIMIT_NAMES:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise PolicyError(f"sandbox limit {field.name} must be a positive integer, got {value!r}")

    @classmethod
    def coerce(cls, value: Limits | Mapping[str, Any] | None) -> Limits:
        """``value`` unchanged, or limits built from a mapping (unknown keys are refused)."""
        if isinstance(value, Limits):
            return value
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise PolicyError(f"sandbox limits must be a Limits or a mapping, got {type(value).__name__}")
        known = {field.name for field in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise PolicyError(f"unknown sandbox limits {unknown}; known: {sorted(known)}")
        return cls(**dict(value))

    def narrowed(self, **requested: int | None) -> Limits:
        """These limits with each requested process limit applied only where it is stricter."""
        changes: dict[str, Any] = {}
        for name, value in requested.items():
            if name not in PROCESS_LIMIT_NAMES and name != "output_bytes":
                raise PolicyError(f"{name!r} is not a per-process sandbox limit")
            if value is None:
                continue
            current = getattr(self, name)
            changes[name] = value if current is None else min(current, value)
        return replace(self, **changes) if changes else self

    def process_limits(self) -> dict[str, int]:
        """The process limits that are set, by name."""
        return {name: getattr(self, name) for name in PROCESS_LIMIT_NAMES if getattr(self, name) is not None}
