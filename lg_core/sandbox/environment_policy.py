"""Which environment a sandboxed child starts with.

A child starts from an empty environment unless both the policy and the individual
call opt in to inheriting the host's: the worker's environment holds provider keys
and database URLs, and a child must never receive them by default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from lg_core.errors import PolicyError


@dataclass(frozen=True)
class EnvironmentPolicy:
    """Whether a child may inherit the host environment, and the explicit values it gets."""

    inherit: bool
    values: Mapping[str, str]

    def __init__(self, inherit: bool = False, values: Mapping[str, Any] | None = None) -> None:
        if not isinstance(inherit, bool):
            raise PolicyError(f"environment inherit must be True or False, got {inherit!r}")
        object.__setattr__(self, "inherit", inherit)
        object.__setattr__(self, "values", MappingProxyType(checked_variables(values or {}, "environment")))

    @classmethod
    def coerce(cls, value: EnvironmentPolicy | Mapping[str, Any] | None) -> EnvironmentPolicy:
        """``value`` unchanged, or a policy from ``{"inherit": ..., "set": {...}}`` (or ``values``)."""
        if isinstance(value, EnvironmentPolicy):
            return value
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise PolicyError(f"an environment policy must be a mapping, got {type(value).__name__}")
        unknown = sorted(set(value) - {"inherit", "set", "values"})
        if unknown:
            raise PolicyError(f"unknown environment policy keys {unknown}; expected inherit and set")
        if "set" in value and "values" in value:
            raise PolicyError("give the environment values as 'set' or 'values', not both")
        return cls(inherit=value.get("inherit", False), values=value.get("set", value.get("values")))

    def to_h(self) -> dict[str, str]:
        """The explicit child environment values."""
        return dict(self.values)

    to_dict = to_h

    def __hash__(self) -> int:
        return hash((self.inherit, tuple(sorted(self.values.items()))))


def checked_variables(values: Mapping[str, Any], label: str) -> dict[str, str]:
    """Environment variables as strings, refusing names and values a process cannot receive."""
    if not isinstance(values, Mapping):
        raise PolicyError(f"{label} variables must be a mapping, got {type(values).__name__}")
    checked: dict[str, str] = {}
    for name, value in values.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise PolicyError(f"{label} variable name {name!r} is not a valid environment name")
        if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
            raise PolicyError(f"{label} variable {name} must be a string, got {type(value).__name__}")
        text = str(value)
        if "\0" in text:
            raise PolicyError(f"{label} variable {name} contains a NUL byte")
        checked[name] = text
    return checked
