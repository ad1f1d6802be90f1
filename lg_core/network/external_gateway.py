"""ExternalGateway: an application-managed proxy that a sandboxed child reaches through a Unix socket.

The application runs, configures and supervises the proxy (its policy, credentials,
readiness, logging and cleanup); LittleGhost neither owns its lifecycle nor attests
what it enforces. The proxy's socket lives in named, process-only Workspace paths
(``runtime_paths``) that the sandbox policy must grant, so the child reaches it at
its real location (no path remapping), and those paths are pinned like every
Workspace directory: a replaced directory fails closed. Before each child starts,
the application's ``validate`` callback may assert the proxy is ready; an error
there refuses the start. The sandbox still removes every direct route out.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lg_core.errors import SandboxConfigurationError
from lg_core.network.gateway import Gateway
from lg_core.sandbox.environment_policy import checked_variables
from lg_core.sandbox.network_policy import NetworkPolicy
from lg_core.workspace import Workspace

PROXY_PORT = 3128
BRIDGE = str(Path(__file__).with_name("_bridge.py").resolve())


class ExternalGateway(Gateway):
    """A gateway around an existing proxy socket in process-only Workspace paths."""

    def __init__(
        self,
        policy: NetworkPolicy,
        workspace: Workspace,
        runtime_paths: Sequence[str],
        proxy_mount_path: str,
        environment: Mapping[str, Any] | None = None,
        validate: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(policy)
        if isinstance(runtime_paths, str) or not runtime_paths:
            raise SandboxConfigurationError("an external gateway needs the names of its process-only workspace paths")
        if not isinstance(proxy_mount_path, str) or not os.path.isabs(proxy_mount_path):
            raise SandboxConfigurationError(f"proxy_mount_path must be an absolute path, got {proxy_mount_path!r}")
        self.workspace = workspace
        self.runtime_paths = tuple(runtime_paths)
        self.proxy_mount_path = os.path.normpath(proxy_mount_path)
        self._environment = checked_variables(environment or {}, "gateway environment")
        self._validate = validate
        self._opened = False

    def open(self, run: Any = None) -> ExternalGateway:
        """Check the socket lies in the named paths of the (open) Workspace; the proxy stays the application's."""
        for name in self.runtime_paths:
            self.workspace.real_path(name)
        if not any(_beneath(self.proxy_mount_path, self.workspace.real_path(n)) for n in self.runtime_paths):
            raise SandboxConfigurationError(
                f"the proxy socket {self.proxy_mount_path} is not inside the gateway's runtime paths "
                f"{list(self.runtime_paths)}"
            )
        self._opened = True
        return self

    def validate(self) -> None:
        """The directories are the pinned ones and the application says its proxy is ready."""
        if not self._opened:
            raise SandboxConfigurationError("the external gateway is not open")
        self.workspace.validate()
        if self._validate is not None:
            try:
                self._validate()
            except Exception as error:
                raise SandboxConfigurationError(f"the external network gateway is not ready: {error}") from error

    def mounts(self) -> tuple[str, ...]:
        """The bridge program; the socket's own directories come from the policy's runtime paths."""
        return (BRIDGE,)

    def environment(self) -> dict[str, str]:
        proxy = f"http://127.0.0.1:{PROXY_PORT}"
        names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
        return {**dict.fromkeys(names, proxy), "NO_PROXY": "", "no_proxy": "", **self._environment}

    def bridge_command(self, python: str) -> list[str]:
        return [python, BRIDGE, self.proxy_mount_path, str(PROXY_PORT), "--"]


def _beneath(path: str, base: str) -> bool:
    return path.startswith(base.rstrip(os.sep) + os.sep)
