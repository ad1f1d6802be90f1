"""Gateway: the lifecycle contract of a filtered-egress gateway for sandboxed processes.

A gateway is one half of an allowlist: it decides which destinations a connection
may reach. The other half is the sandbox, which must remove every direct route out
(its own network namespace), so the gateway is the only way out. A gateway that is
no longer ready must fail closed in :meth:`Gateway.validate` before a child starts.
"""

from __future__ import annotations

from typing import Any

from lg_core.errors import AbstractMethodError
from lg_core.sandbox.network_policy import NetworkPolicy


class Gateway:
    """Base class: open, close, and what a child needs (mounts and environment) to use it."""

    def __init__(self, policy: NetworkPolicy) -> None:
        if not policy.allowlist:
            raise ValueError(f"a gateway enforces an allowlist network policy, not {policy.mode!r}")
        self.policy = policy

    def open(self, run: Any = None) -> Gateway:
        """Start run-scoped gateway resources."""
        return self

    def close(self) -> None:
        """Stop owned resources; safe to repeat."""

    def validate(self) -> None:
        """Fail closed when the gateway can no longer serve a child."""

    def mounts(self) -> tuple[str, ...]:
        """Host directories a child needs, read-only, at the same path."""
        return ()

    def environment(self) -> dict[str, str]:
        """Proxy variables for a child."""
        return {}

    def bridge_command(self, python: str) -> list[str]:
        """The argv prefix that runs a command behind this gateway's bridge inside the sandbox."""
        raise AbstractMethodError(f"{type(self).__name__} must say how a child reaches it (bridge_command)")

    def client_network(self) -> str | None:
        """An isolated container network name, when the gateway uses one."""
        return None
