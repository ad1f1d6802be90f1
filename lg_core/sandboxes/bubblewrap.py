"""Bubblewrap: each command in fresh Linux namespaces, seeing only what the policy grants.

Every command runs under ``bwrap`` with new user, PID, mount, IPC, UTS and cgroup
namespaces, all capabilities dropped, a new session (no terminal injection), and a
network namespace of its own unless the policy inherits the host network. With the
``isolated`` root filesystem the child sees the read-only runtime roots (``/usr`` and
the few ``/etc`` files programs need), fresh ``/proc``, ``/dev`` and ``/tmp``, and the
granted Workspace paths at their real locations: nothing else of the host exists.

The PID namespace owns every descendant: when the supervising ``bwrap`` dies (the
session is closed or killed) its init dies and the kernel ends the whole namespace,
including children that detached into their own session. A process-count limit is
RLIMIT_NPROC set inside the user namespace, where it counts only the sandbox's own
processes; the kernel does not apply it to root, so a worker running as root must
give ``host_user`` (the unprivileged user the sandbox runs as) to get one, and
without it a process limit is refused rather than ignored.

An allowlist network keeps the network namespace empty (no direct socket reaches
anything) and starts an :class:`~lg_core.network.AllowlistGateway`, an enforcing
proxy in the worker reachable from inside only through its Unix socket; a small
bridge run by ``bridge_python`` inside the sandbox is the child's only way to it.
An :class:`~lg_core.network.ExternalGateway` in the policy's network uses the
application's own proxy instead, through its socket in granted runtime paths.
Without that interpreter the allowlist is refused (CapabilityError), never ignored.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from lg_core.errors import CapabilityError, DependencyError, SandboxConfigurationError, UnsupportedPlatformError
from lg_core.network.allowlist_gateway import AllowlistGateway
from lg_core.network.external_gateway import ExternalGateway
from lg_core.network.gateway import Gateway
from lg_core.sandbox import capabilities as features
from lg_core.sandbox.capabilities import Capabilities
from lg_core.sandbox.launch import Launch, LaunchRequest
from lg_core.sandbox.limits import Limits
from lg_core.sandbox.network_policy import NetworkPolicy
from lg_core.sandbox.policy import Grant, Policy
from lg_core.sandbox.probe_report import ProbeReport
from lg_core.sandbox.process_session import prlimit_executable, resource_limit_arguments
from lg_core.sandbox.sandbox import Sandbox
from lg_core.workspace import Workspace

DEFAULT_EXECUTABLE = "/usr/bin/bwrap"
DEFAULT_BRIDGE_PYTHON = "/usr/bin/python3"
RUNTIME_ROOTS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/localtime",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
)
DEFAULT_TMPFS = ("/tmp", "/run")
_NAMESPACES = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
)
PROBE_TIMEOUT_SECONDS = 10


class Bubblewrap(Sandbox):
    """A command-scoped Linux namespace sandbox (see the module docstring)."""

    name = "bubblewrap"

    def __init__(
        self,
        workspace: Workspace,
        policy: Policy | Mapping[str, Any] | None = None,
        profiles: Mapping[str, Mapping[str, Any]] | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
        bubblewrap: str = DEFAULT_EXECUTABLE,
        platform: str = sys.platform,
        tmpfs: Sequence[str] = DEFAULT_TMPFS,
        masks: Sequence[str] = (),
        runtime_roots: Sequence[str] = RUNTIME_ROOTS,
        uid: int | None = None,
        gid: int | None = None,
        host_user: int | None = None,
        host_group: int | None = None,
        bridge_python: str = DEFAULT_BRIDGE_PYTHON,
    ) -> None:
        if not platform.startswith("linux"):
            raise UnsupportedPlatformError(f"Bubblewrap needs Linux namespaces; this platform is {platform!r}")
        self.executable = bubblewrap
        self.tmpfs = tuple(_absolute(path, "tmpfs") for path in tmpfs)
        self.masks = tuple(_absolute(path, "masks") for path in masks)
        self.runtime_roots = tuple(_absolute(path, "runtime_roots") for path in runtime_roots)
        self.uid, self.gid = uid, gid
        if host_user is not None and os.geteuid() != 0:
            raise CapabilityError("host_user switches the sandbox's host user, which needs a worker running as root")
        self.host_user = host_user
        self.host_group = host_group if host_group is not None else host_user
        self.bridge_python = bridge_python
        self._gateways: dict[tuple[str, ...], AllowlistGateway] = {}
        self._gateway_lock = threading.Lock()
        super().__init__(workspace, policy=policy, profiles=profiles, limits=limits)

    # -- what it enforces --------------------------------------------------------------------

    @classmethod
    def backend_capabilities(cls) -> Capabilities:
        limits = [features.MEMORY_LIMIT]
        if prlimit_executable() is not None:
            limits += [features.CPU_LIMIT, features.FILE_SIZE_LIMIT, features.PROCESS_LIMIT]
        return Capabilities(
            features=(*features.DEFAULT_FEATURES, features.PROCESS_TREE_OWNERSHIP, *limits),
            network_modes=_network_modes(DEFAULT_BRIDGE_PYTHON),
            isolation="namespace",
        )

    def capabilities(self) -> Capabilities:
        capabilities = super().capabilities()
        if self.host_user is None and os.geteuid() == 0:
            capabilities = capabilities.without(features.PROCESS_LIMIT)
        return Capabilities(capabilities.features, _network_modes(self.bridge_python), capabilities.isolation)

    def _enforceable(self, policy: Policy) -> Policy:
        network = policy.network or NetworkPolicy("none")
        if network.allowlist:
            self._check_allowlist_support(network)
        return policy.with_changes(network=network) if policy.network is None else policy

    # -- lifecycle ---------------------------------------------------------------------------

    def _open_backend(self, run: Any) -> None:
        if not (os.path.isfile(self.executable) and os.access(self.executable, os.X_OK)):
            raise DependencyError(f"bubblewrap is not installed at {self.executable}; it is never replaced")
        if self.host_user is not None:
            for grant in self.process_grants():
                _check_host_user_access(grant, self.host_user, self.host_group)
        if self.network.allowlist:
            if self.network.gateway is not None:
                self.network.gateway.open(run)
            self._gateway_for(self.network, self.process_grants())

    def _close_backend(self) -> None:
        with self._gateway_lock:
            gateways, self._gateways = list(self._gateways.values()), {}
        for gateway in gateways:
            gateway.close()

    def _check_allowlist_support(self, network: NetworkPolicy) -> None:
        if network.gateway is not None and not isinstance(network.gateway, ExternalGateway):
            raise CapabilityError(
                f"the bubblewrap backend runs its own allowlist gateway or an ExternalGateway, "
                f"not a {type(network.gateway).__name__}"
            )
        if network.inspection != "connect" or network.authorizer is not None:
            raise CapabilityError("the allowlist gateway checks destinations only; HTTP inspection is not available")
        if not _runnable(self.bridge_python):
            raise CapabilityError(
                f"a network allowlist needs {self.bridge_python} to run the gateway bridge inside the sandbox; "
                "proxy variables alone are not an allowlist"
            )

    def _gateway_for(self, network: NetworkPolicy, grants: Sequence[Grant]) -> Gateway:
        """The running gateway for this allowlist (a Scope's narrower list gets its own)."""
        if isinstance(network.gateway, ExternalGateway):
            self._check_allowlist_support(network)
            granted = {grant.name for grant in grants if grant.process_only}
            missing = [name for name in network.gateway.runtime_paths if name not in granted]
            if missing:
                raise CapabilityError(f"the external gateway needs runtime paths {missing}, which are not granted")
            network.gateway.validate()
            return network.gateway
        with self._gateway_lock:
            gateway = self._gateways.get(network.allow)
            if gateway is None:
                self._check_allowlist_support(network)
                gateway = AllowlistGateway(network, owner=self.host_user).open()
                self._gateways[network.allow] = gateway
        gateway.validate()
        return gateway

    # -- launching ---------------------------------------------------------------------------

    def bubblewrap_args(
        self,
        grants: Sequence[Grant] | None = None,
        cwd: str | None = None,
        network: NetworkPolicy | None = None,
        gateway_mounts: Sequence[str] = (),
    ) -> list[str]:
        """The exact bwrap policy arguments placed before the command."""
        grants = self.process_grants() if grants is None else grants
        network = network or self.network
        args = list(_NAMESPACES)
        if not network.inherit:
            args.append("--unshare-net")
        if self.uid is not None:
            args += ["--uid", str(self.uid)]
        if self.gid is not None:
            args += ["--gid", str(self.gid)]
        args += self._root_filesystem_args()
        for mask in self.masks:
            args += ["--tmpfs", mask] if os.path.isdir(mask) else ["--ro-bind-try", "/dev/null", mask]
        for grant in grants:
            args += ["--bind" if grant.writable else "--ro-bind", grant.path, grant.path]
        for mount in gateway_mounts:
            args += ["--ro-bind", mount, mount]
        args += ["--chdir", cwd or self.workspace.real_path("root")]
        return args

    def _root_filesystem_args(self) -> list[str]:
        mode = self.effective_policy.root_filesystem
        if mode == "read_write":
            return ["--bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
        if mode == "read_only":
            args = ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
        else:
            args = []
            for root in self.runtime_roots:
                if os.path.islink(root):
                    args += ["--symlink", os.readlink(root), root]
                elif os.path.exists(root):
                    args += ["--ro-bind", root, root]
            args += ["--proc", "/proc", "--dev", "/dev"]
        for path in self.tmpfs:
            args += ["--tmpfs", path]
        return args

    def _launch(self, request: LaunchRequest) -> Launch:
        inner_limits = resource_limit_arguments(processes=request.limits.processes)
        environment = dict(request.environment)
        bridge: list[str] = []
        mounts: tuple[str, ...] = ()
        if request.network.allowlist:
            gateway = self._gateway_for(request.network, request.grants)
            environment.update(gateway.environment())
            bridge, mounts = gateway.bridge_command(self.bridge_python), gateway.mounts()
        argv = (
            self.executable,
            *self.bubblewrap_args(request.grants, request.cwd, request.network, mounts),
            "--",
            *bridge,
            *inner_limits,
            *request.command,
        )
        return Launch(argv, environment, "/", user=self.host_user, group=self.host_group)

    # -- probing -----------------------------------------------------------------------------

    @classmethod
    def probe_host(cls, **options: Any) -> ProbeReport:
        """Whether bwrap exists and can create its namespaces on this host (it runs ``true`` once).

        With ``host_user`` (a root worker's sandbox user) the probe runs as that user,
        since a host may allow namespaces to root and refuse them to everyone else.
        """
        executable = str(options.get("executable", DEFAULT_EXECUTABLE))
        host_user = options.get("host_user")
        platform = str(options.get("platform", sys.platform))
        if not platform.startswith("linux"):
            return ProbeReport(cls.name, False, f"Bubblewrap needs Linux; this platform is {platform!r}")
        if not os.access(executable, os.X_OK):
            return ProbeReport(cls.name, False, f"bubblewrap is not installed at {executable}")
        true = shutil.which("true", path="/usr/bin:/bin") or "/bin/true"
        try:
            completed = subprocess.run(
                [executable, *_NAMESPACES, "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc", "--", true],
                capture_output=True,
                timeout=PROBE_TIMEOUT_SECONDS,
                env={},
                cwd="/",
                user=host_user,
                group=options.get("host_group", host_user),
                extra_groups=[] if host_user is not None else None,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return ProbeReport(cls.name, False, f"bubblewrap could not start: {error}")
        if completed.returncode != 0:
            reason = completed.stderr.decode("utf-8", "replace").strip() or f"exit status {completed.returncode}"
            return ProbeReport(cls.name, False, f"bubblewrap cannot create its namespaces here: {reason}")
        capabilities = cls.backend_capabilities()
        details = {
            "executable": executable,
            "memory_limit": "sampled every 100 ms",
            "process_limit": (
                "RLIMIT_NPROC inside the user namespace (needs a non-root sandbox user)"
                if capabilities.supports(features.PROCESS_LIMIT)
                else "unavailable: prlimit is missing"
            ),
            "network_allowlist": (
                "enforced by the gateway proxy"
                if capabilities.supports(features.NETWORK, "allowlist")
                else f"refused: {DEFAULT_BRIDGE_PYTHON} is missing"
            ),
        }
        return ProbeReport(cls.name, True, None, capabilities, details)


def _check_host_user_access(grant: Grant, uid: int, gid: int | None) -> None:
    """Fail at open, with a clear message, when the sandbox user could not use a granted directory.

    Permission bits only (no ACLs): every ancestor must be searchable and the directory
    itself readable, and writable for a read-write grant.
    """
    path = grant.path
    needs = [(ancestor, os.X_OK) for ancestor in _ancestors(path)]
    needs.append((path, os.R_OK | os.X_OK | (os.W_OK if grant.writable else 0)))
    for directory, mode in needs:
        status = os.stat(directory)
        if status.st_uid == uid:
            bits = (status.st_mode >> 6) & 0o7
        elif gid is not None and status.st_gid == gid:
            bits = (status.st_mode >> 3) & 0o7
        else:
            bits = status.st_mode & 0o7
        if bits & mode != mode:
            access = "write" if grant.writable else "read"
            raise SandboxConfigurationError(
                f"the sandbox user {uid} cannot {access} workspace path {grant.name!r} ({path}): "
                f"{directory} does not allow it; give that user access or run the worker as it"
            )


def _ancestors(path: str) -> list[str]:
    parents = []
    current = os.path.dirname(path)
    while True:
        parents.append(current)
        if current == os.path.dirname(current):
            return list(reversed(parents))
        current = os.path.dirname(current)


def _network_modes(bridge_python: str) -> tuple[str, ...]:
    """The allowlist is enforceable only where the gateway bridge can run inside the sandbox."""
    return ("none", "allowlist", "inherit") if _runnable(bridge_python) else ("none", "inherit")


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _absolute(path: str, label: str) -> str:
    if not isinstance(path, str) or not os.path.isabs(path):
        raise ValueError(f"{label} entries must be absolute paths, got {path!r}")
    return os.path.normpath(path)
