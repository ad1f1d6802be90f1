"""Sandbox Policy: which Workspace paths a sandbox grants, how much of the host exists,
the child environment and the child network, as one immutable declaration.

``files`` are visible to filesystem tools and to child processes; ``runtime_paths``
(interpreter libraries, homes, sockets) only to child processes. Both map a
Workspace name (``root`` for the root) to ``read_only`` or ``read_write``. Where
granted paths nest, the most restrictive access covering a path wins, so a
read-write directory inside a read-only one stays read-only.

A Policy is not proof of isolation: the backend reports what it enforces
(``effective_policy``) and refuses what it cannot.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from lg_core.errors import PolicyError
from lg_core.sandbox.environment_policy import EnvironmentPolicy
from lg_core.sandbox.network_policy import NetworkPolicy

if TYPE_CHECKING:
    from lg_core.workspace import Workspace

READ_ONLY = "read_only"
READ_WRITE = "read_write"
ACCESS_MODES = (READ_ONLY, READ_WRITE)
ROOT_FILESYSTEMS = ("isolated", "read_only", "read_write")
POLICY_KEYS = ("files", "runtime_paths", "root_filesystem", "environment", "network")


@dataclass(frozen=True)
class Grant:
    """One physical directory a child process may use, and how."""

    name: str
    path: str
    access: str
    process_only: bool

    @property
    def writable(self) -> bool:
        return self.access == READ_WRITE


@dataclass(frozen=True)
class Policy:
    """Requested filesystem, environment and network controls for a Sandbox."""

    files: Mapping[str, str]
    runtime_paths: Mapping[str, str]
    root_filesystem: str
    environment: EnvironmentPolicy
    network: NetworkPolicy | None

    def __init__(
        self,
        files: Mapping[str, str] | None = None,
        runtime_paths: Mapping[str, str] | Iterable[str] | None = None,
        root_filesystem: str = "isolated",
        environment: EnvironmentPolicy | Mapping[str, Any] | None = None,
        network: NetworkPolicy | str | bool | Mapping[str, Any] | None = None,
    ) -> None:
        checked_files = access_map({"root": READ_ONLY} if files is None else files, "files")
        checked_runtime = access_map(runtime_paths or {}, "runtime_paths")
        both = sorted(set(checked_files) & set(checked_runtime))
        if both:
            raise PolicyError(f"paths {both} are in both files and runtime_paths; give each path one role")
        if root_filesystem not in ROOT_FILESYSTEMS:
            raise PolicyError(f"root_filesystem must be one of {', '.join(ROOT_FILESYSTEMS)}, got {root_filesystem!r}")
        object.__setattr__(self, "files", MappingProxyType(checked_files))
        object.__setattr__(self, "runtime_paths", MappingProxyType(checked_runtime))
        object.__setattr__(self, "root_filesystem", root_filesystem)
        object.__setattr__(self, "environment", EnvironmentPolicy.coerce(environment))
        object.__setattr__(self, "network", NetworkPolicy.coerce(network))

    @classmethod
    def coerce(cls, value: Policy | Mapping[str, Any] | None = None, **options: Any) -> Policy:
        """An existing policy, or one built from a mapping and keyword options (unknown keys refused)."""
        if isinstance(value, Policy) and not options:
            return value
        if value is not None and not isinstance(value, Policy | Mapping):
            raise PolicyError(f"a sandbox policy must be a Policy or a mapping, got {type(value).__name__}")
        merged = dict(value.as_dict() if isinstance(value, Policy) else (value or {}))
        merged.update(options)
        unknown = sorted(set(merged) - set(POLICY_KEYS))
        if unknown:
            raise PolicyError(f"unknown sandbox policy keys {unknown}; known: {list(POLICY_KEYS)}")
        return cls(**merged)

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": dict(self.files),
            "runtime_paths": dict(self.runtime_paths),
            "root_filesystem": self.root_filesystem,
            "environment": self.environment,
            "network": self.network,
        }

    def with_changes(self, **changes: Any) -> Policy:
        """A copy with some fields replaced, validated like a new policy."""
        return Policy.coerce(self, **changes) if changes else self

    @property
    def workspace_writable(self) -> bool:
        """Whether ``files`` grants the Workspace root read-write."""
        return self.files.get("root") == READ_WRITE

    def process_grants(self, workspace: Workspace) -> tuple[Grant, ...]:
        """The physical directories a child gets, outermost first, each at its effective access."""
        return nested_grants(workspace, self.files, self.runtime_paths)


def access_map(value: Mapping[str, str] | Iterable[str], label: str) -> dict[str, str]:
    """``{name: access}`` checked; a list of names means each read-only."""
    if isinstance(value, str):
        raise PolicyError(f"{label} must map path names to access, got the string {value!r}")
    items = value.items() if isinstance(value, Mapping) else ((name, READ_ONLY) for name in value)
    checked: dict[str, str] = {}
    for name, access in items:
        if not isinstance(name, str) or not name:
            raise PolicyError(f"{label} names must be Workspace path names, got {name!r}")
        if access not in ACCESS_MODES:
            raise PolicyError(f"{label}[{name!r}] must be 'read_only' or 'read_write', got {access!r}")
        checked[name] = access
    return checked


def nested_grants(
    workspace: Workspace, files: Mapping[str, str], runtime_paths: Mapping[str, str]
) -> tuple[Grant, ...]:
    """Grants for ``files`` and ``runtime_paths``, the most restrictive covering access winning."""
    requested: list[Grant] = []
    for process_only, mapping in ((False, files), (True, runtime_paths)):
        for name, access in mapping.items():
            try:
                path = workspace.real_path(name)
            except KeyError:
                raise PolicyError(
                    f"the sandbox policy grants {name!r}, which the workspace does not declare "
                    f"(names: {', '.join(workspace.names)})"
                ) from None
            requested.append(Grant(name, path, access, process_only))
    effective = []
    for grant in requested:
        covering = [other for other in requested if _covers(other.path, grant.path)]
        access = READ_ONLY if any(other.access == READ_ONLY for other in covering) else grant.access
        effective.append(replace(grant, access=access))
    return tuple(sorted(effective, key=lambda grant: (grant.path.count(os.sep), grant.path)))


def _covers(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)
