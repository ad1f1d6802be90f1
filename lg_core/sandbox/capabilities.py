"""What a Sandbox backend implements: operations, network modes and its isolation mechanism.

Capabilities describe the backend, not the deployment around it: they are safe to
show to tools and never a security certification. A Scope narrows them with
:meth:`Capabilities.intersect`, which can only remove.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

FILESYSTEM_READ = "filesystem_read"
FILESYSTEM_LIST = "filesystem_list"
FILESYSTEM_WRITE = "filesystem_write"
PROCESS_EXECUTE = "process_execute"
PROCESS_SPAWN = "process_spawn"
PROCESS_SPAWN_DENIAL = "process_spawn_denial"
PROCESS_TREE_OWNERSHIP = "process_tree_ownership"
CPU_LIMIT = "cpu_limit"
MEMORY_LIMIT = "memory_limit"
FILE_SIZE_LIMIT = "file_size_limit"
PROCESS_LIMIT = "process_limit"
OUTPUT_LIMIT = "output_limit"
NETWORK = "network"

DEFAULT_FEATURES = (
    FILESYSTEM_READ,
    FILESYSTEM_LIST,
    FILESYSTEM_WRITE,
    PROCESS_EXECUTE,
    PROCESS_SPAWN,
    OUTPUT_LIMIT,
)
NETWORK_MODES = ("none", "allowlist", "inherit")


@dataclass(frozen=True)
class Capabilities:
    """Operation names, enforceable network modes and a descriptive isolation label."""

    features: frozenset[str]
    network_modes: frozenset[str]
    isolation: str

    def __init__(
        self,
        features: Iterable[str] = DEFAULT_FEATURES,
        network_modes: Iterable[str] = ("inherit",),
        isolation: str = "none",
    ) -> None:
        modes = frozenset(str(mode) for mode in network_modes)
        unknown = modes - set(NETWORK_MODES)
        if unknown:
            raise ValueError(f"unknown network modes {sorted(unknown)}; expected some of {NETWORK_MODES}")
        object.__setattr__(self, "features", frozenset(str(feature) for feature in features))
        object.__setattr__(self, "network_modes", modes)
        object.__setattr__(self, "isolation", str(isolation))

    def supports(self, feature: str, value: str | None = None) -> bool:
        """Whether ``feature`` is available; for ``network``, ``value`` names the requested mode."""
        if feature == NETWORK:
            return bool(self.network_modes) if value is None else str(value) in self.network_modes
        return feature in self.features

    include = supports

    def __contains__(self, feature: object) -> bool:
        return isinstance(feature, str) and self.supports(feature)

    def intersect(self, other: Capabilities) -> Capabilities:
        """A capability set no broader than both operands (this isolation label is kept)."""
        return Capabilities(
            features=self.features & other.features,
            network_modes=self.network_modes & other.network_modes,
            isolation=self.isolation,
        )

    def without(self, *features: str) -> Capabilities:
        """These capabilities minus ``features``."""
        return Capabilities(self.features - set(features), self.network_modes, self.isolation)
