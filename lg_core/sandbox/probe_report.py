"""What probing a sandbox backend found: whether it can start here and what it would enforce."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lg_core.sandbox.capabilities import Capabilities


@dataclass(frozen=True)
class ProbeReport:
    """Whether a backend can start here, what it would enforce, and why not when it cannot."""

    backend: str
    available: bool
    reason: str | None = None
    capabilities: Capabilities | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
