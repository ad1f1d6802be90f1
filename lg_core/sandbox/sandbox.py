"""Sandbox: the authority over the files and child processes that pass through it.

A Sandbox binds a Workspace to a Policy and a backend that enforces it. Opening checks
that the backend can enforce the policy; every process start re-checks that the
Workspace's directories are the ones it opened with (fail closed), builds the child's
environment (empty unless policy and call both opt in to inheriting, plus the
Workspace's variables and the explicit values) and hands a launch description to the
backend. A backend refuses what it cannot enforce instead of running without it, and
selecting an enforcing backend never falls back to unrestricted execution.

Backends are registered by name (``bubblewrap``, ``unrestricted``, ``native``);
:meth:`Sandbox.probe` reports what a backend can enforce on this host without
creating a sandbox.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from importlib import import_module
from typing import Any, NoReturn

from lg_core.errors import (
    AbstractMethodError,
    CapabilityError,
    DependencyError,
    PolicyError,
    SandboxConfigurationError,
)
from lg_core.sandbox import capabilities as features
from lg_core.sandbox._file_operations import FileOperations
from lg_core.sandbox.capabilities import Capabilities
from lg_core.sandbox.execution import Execution, run_to_completion
from lg_core.sandbox.launch import (
    Launch,
    LaunchRequest,
    argument_vector,
    child_environment,
    narrowed_output,
    working_directory,
)
from lg_core.sandbox.limits import Limits
from lg_core.sandbox.network_policy import NetworkPolicy
from lg_core.sandbox.policy import POLICY_KEYS, READ_WRITE, Grant, Policy, nested_grants
from lg_core.sandbox.probe_report import ProbeReport
from lg_core.sandbox.process_session import ProcessSession, resource_limit_arguments
from lg_core.sandbox.scope import Scope, allows_operation
from lg_core.workspace import Workspace

_LIMIT_FEATURES = {
    "cpu_seconds": features.CPU_LIMIT,
    "memory_bytes": features.MEMORY_LIMIT,
    "file_bytes": features.FILE_SIZE_LIMIT,
    "processes": features.PROCESS_LIMIT,
}
_BUILTIN_PROVIDERS = {
    "bubblewrap": "lg_core.sandboxes.bubblewrap:Bubblewrap",
    "native": "lg_core.sandboxes.native:Native",
    "unrestricted": "lg_core.sandboxes.unrestricted:Unrestricted",
}


class Sandbox:
    """Base class of the sandbox backends; see the module docstring."""

    name = "sandbox"
    _providers: dict[str, Any] = {}

    def __init__(
        self,
        workspace: Workspace,
        policy: Policy | Mapping[str, Any] | None = None,
        profiles: Mapping[str, Mapping[str, Any]] | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(workspace, Workspace):
            raise SandboxConfigurationError(f"a sandbox needs a Workspace, got {type(workspace).__name__}")
        self.workspace = workspace
        self.policy = Policy.coerce(policy)
        self.limits = Limits.coerce(limits)
        self.profiles = {str(name): dict(options) for name, options in dict(profiles or {}).items()}
        self._effective_policy = self._enforceable(self.policy)
        self._opened = False
        self._closed = False

    # -- providers and probing ---------------------------------------------------------------

    @classmethod
    def register_provider(cls, name: str, implementation: Any) -> None:
        """Register a trusted backend class (or a ``module:Class`` path) under a configuration name."""
        Sandbox._providers[str(name)] = implementation

    @classmethod
    def resolve_provider(cls, name: str) -> Any:
        """The backend registered as ``name``; an unknown name is an error, never a fallback."""
        implementation = Sandbox._providers.get(str(name), _BUILTIN_PROVIDERS.get(str(name)))
        if implementation is None:
            known = ", ".join(sorted({*_BUILTIN_PROVIDERS, *Sandbox._providers}))
            raise SandboxConfigurationError(f"no sandbox backend named {name!r} (known: {known})")
        if isinstance(implementation, str):
            module, _, attribute = implementation.partition(":")
            implementation = getattr(import_module(module), attribute)
        return implementation

    @classmethod
    def from_settings(cls, workspace: Workspace, settings: Mapping[str, Any]) -> Sandbox:
        """A sandbox from configuration: ``{"provider": "native", <policy keys>, "limits": ..., <backend options>}``.

        The provider defaults to ``native``, the platform's isolating backend, which
        fails closed where there is none; unrestricted execution is never a default.
        """
        if not isinstance(settings, Mapping):
            raise PolicyError(f"sandbox settings must be a mapping, got {type(settings).__name__}")
        options = dict(settings)
        provider = options.pop("provider", "native")
        policy = {key: options.pop(key) for key in POLICY_KEYS if key in options}
        backend = cls.resolve_provider(provider)
        try:
            return backend(workspace=workspace, policy=policy, **options)  # type: ignore[no-any-return]
        except TypeError as error:
            raise PolicyError(f"sandbox provider {provider!r} was given an option it does not take: {error}") from None

    @classmethod
    def probe(cls, name: str | None = None, **options: Any) -> ProbeReport:
        """Whether backend ``name`` (this class when None) can start here, without building a sandbox."""
        if name is not None:
            backend = cls.resolve_provider(name)
            return backend.probe(**options)  # type: ignore[no-any-return]
        return cls.probe_host(**options)

    @classmethod
    def require(cls, name: str = "native", **options: Any) -> ProbeReport:
        """Probe backend ``name`` and raise DependencyError when it cannot run here (for start-up checks)."""
        report = cls.probe(name, **options)
        if not report.available:
            raise DependencyError(f"the {name} sandbox backend cannot run on this host: {report.reason}")
        return report

    @classmethod
    def probe_host(cls, **options: Any) -> ProbeReport:
        """This backend's own probe; backends override it."""
        return ProbeReport(cls.name, False, "an abstract sandbox cannot run programs")

    @classmethod
    def backend_capabilities(cls) -> Capabilities:
        """What this backend can enforce before a policy narrows it."""
        return Capabilities(features=(), network_modes=(), isolation="none")

    # -- what this sandbox grants ------------------------------------------------------------

    @property
    def effective_policy(self) -> Policy:
        """The policy this backend enforces (documented defaults filled in)."""
        return self._effective_policy

    @property
    def files(self) -> Mapping[str, str]:
        return self._effective_policy.files

    @property
    def runtime_paths(self) -> Mapping[str, str]:
        return self._effective_policy.runtime_paths

    @property
    def network(self) -> NetworkPolicy:
        network = self._effective_policy.network
        assert network is not None, "backends fill in their default network mode"
        return network

    def capabilities(self) -> Capabilities:
        """Operations and network modes this sandbox implements under its policy."""
        capabilities = self.backend_capabilities()
        if not self.writable:
            capabilities = capabilities.without(features.FILESYSTEM_WRITE)
        return capabilities

    def supports(self, feature: str, value: str | None = None) -> bool:
        """Whether this sandbox implements ``feature`` (for ``network``, mode ``value``)."""
        return self.capabilities().supports(feature, value)

    def allows(self, operation: str, path: str | None = None) -> bool:
        """Whether ``operation`` is available, at the virtual ``path`` when one is given."""
        return allows_operation(self, operation, path)

    @property
    def writable(self) -> bool:
        """Whether any tool-visible path accepts writes."""
        return READ_WRITE in self.files.values()

    def scope(self, profile: str | None = None, **narrowing: Any) -> Scope:
        """A non-owning view that can only narrow this sandbox; ``profile`` names preset narrowing."""
        if profile is not None:
            if profile not in self.profiles:
                raise PolicyError(f"no sandbox profile named {profile!r} (profiles: {sorted(self.profiles)})")
            narrowing = {**self.profiles[profile], **{k: v for k, v in narrowing.items() if v is not None}}
        return Scope(self, **narrowing)

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self, run: Any = None) -> Sandbox:
        """Check the Workspace is open and the backend can run, and make the sandbox ready."""
        if self._closed:
            raise SandboxConfigurationError("this sandbox is closed and cannot be opened again")
        if self._opened:
            return self
        if not self.workspace.opened:
            raise SandboxConfigurationError("open the workspace before the sandbox that governs it")
        self.workspace.validate()
        self.process_grants()
        self._open_backend(run)
        self._opened = True
        return self

    def close(self) -> None:
        """Release backend resources; safe to repeat. Runs close the sandbox before its workspace."""
        if not self._closed:
            self._closed = True
            self._close_backend()

    def __enter__(self) -> Sandbox:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- files -------------------------------------------------------------------------------

    def read(self, path: str, context: Any = None) -> str:
        """Bounded UTF-8 text at a root-relative or ``workspace://`` path, never through a symlink."""
        return FileOperations(self).read(path, context)

    def write(self, path: str, content: str | bytes, context: Any = None) -> int:
        """Write bounded ``content`` at a writable virtual ``path``, replacing (never following) a link."""
        return FileOperations(self).write(path, content, context)

    def replace(self, path: str, old_text: str, new_text: str, context: Any = None) -> str:
        """Replace the one exact occurrence of ``old_text`` in a writable file; the new text."""
        return FileOperations(self).replace(path, old_text, new_text, context)

    def list(self, path: str = ".", context: Any = None) -> str:
        """A sorted, newline-delimited listing of a visible directory; directories end in ``/``."""
        return FileOperations(self).list(path, context)

    # -- processes ---------------------------------------------------------------------------

    def process_grants(self, view: Any = None) -> tuple[Grant, ...]:
        """The physical directories a child of this sandbox (or of ``view``) receives."""
        view = view or self
        return nested_grants(self.workspace, view.files, view.runtime_paths)

    def execute(self, command: str, timeout: float, **options: Any) -> Execution:
        """Run ``command`` through ``/bin/sh -c``; prefer :meth:`execute_program` for model input."""
        if not isinstance(command, str) or not command:
            raise ValueError("a shell command must be a non-empty string")
        return self.execute_program(["/bin/sh", "-c", command], timeout=timeout, **options)

    def execute_program(
        self,
        command: Sequence[str],
        timeout: float,
        context: Any = None,
        max_output_bytes: int | None = None,
        environment: Mapping[str, Any] | None = None,
        inherit_environment: bool = False,
        **options: Any,
    ) -> Execution:
        """Run an argument vector to completion (no shell) and return its bounded result."""
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        session = self.start_program(
            command,
            context=context,
            environment=environment,
            inherit_environment=inherit_environment,
            output_bytes=max_output_bytes,
            per_stream_output=True,
            **options,
        )
        return run_to_completion(session, timeout, context)

    def start_program(
        self,
        command: Sequence[str],
        context: Any = None,
        environment: Mapping[str, Any] | None = None,
        inherit_environment: bool = False,
        scope: Scope | None = None,
        cwd: str | None = None,
        output_bytes: int | None = None,
        memory_bytes: int | None = None,
        cpu_seconds: int | None = None,
        file_bytes: int | None = None,
        processes: int | None = None,
        allow_subprocesses: bool = True,
        memory_reader: Any = None,
        per_stream_output: bool = False,
    ) -> ProcessSession:
        """Start an owned duplex child; the caller must close the returned session."""
        request, launch = self._prepare(
            command,
            context=context,
            environment=environment,
            inherit_environment=inherit_environment,
            scope=scope,
            cwd=cwd,
            requested_limits={
                "memory_bytes": memory_bytes,
                "cpu_seconds": cpu_seconds,
                "file_bytes": file_bytes,
                "processes": processes,
            },
            allow_subprocesses=allow_subprocesses,
        )
        limits = request.limits
        return ProcessSession(
            launch.argv,
            environment=launch.environment,
            chdir=launch.cwd,
            output_bytes=narrowed_output(output_bytes, limits.output_bytes),
            memory_bytes=limits.memory_bytes,
            memory_reader=memory_reader,
            cpu_seconds=limits.cpu_seconds,
            file_bytes=limits.file_bytes,
            user=launch.user,
            group=launch.group,
            per_stream_output=per_stream_output,
        )

    def exec_program(
        self,
        command: Sequence[str],
        scope: Scope | None = None,
        cwd: str | None = None,
        environment: Mapping[str, Any] | None = None,
        inherit_environment: bool = False,
        cpu_seconds: int | None = None,
        file_bytes: int | None = None,
        processes: int | None = None,
    ) -> NoReturn:
        """Replace this process with the confined command, attached to its terminal.

        For interactive command-line use. What needs a supervising parent cannot
        follow: a memory limit (sampled by the parent) and an allowlist network (its
        gateway runs in this process) are refused rather than dropped.
        """
        request, launch = self._prepare(
            command,
            environment=environment,
            inherit_environment=inherit_environment,
            scope=scope,
            cwd=cwd,
            requested_limits={"cpu_seconds": cpu_seconds, "file_bytes": file_bytes, "processes": processes},
        )
        if request.limits.memory_bytes is not None:
            raise CapabilityError("exec_program replaces the process that would supervise the memory limit")
        if request.network.allowlist:
            raise CapabilityError("exec_program replaces the process that runs the network allowlist gateway")
        argv = [
            *resource_limit_arguments(cpu_seconds=request.limits.cpu_seconds, file_bytes=request.limits.file_bytes),
            *launch.argv,
        ]
        os.chdir(launch.cwd)
        if launch.user is not None:
            os.setgroups([])
            os.setgid(launch.group if launch.group is not None else launch.user)
            os.setuid(launch.user)
        os.execve(argv[0], argv, dict(launch.environment))

    def _prepare(
        self,
        command: Sequence[str],
        context: Any = None,
        environment: Mapping[str, Any] | None = None,
        inherit_environment: bool = False,
        scope: Scope | None = None,
        cwd: str | None = None,
        requested_limits: Mapping[str, int | None] | None = None,
        allow_subprocesses: bool = True,
    ) -> tuple[LaunchRequest, Launch]:
        """Check a process start against the policy and scope, and let the backend build its launch."""
        if not self._opened or self._closed:
            raise SandboxConfigurationError("the sandbox is not open; call open() before starting programs")
        argv = argument_vector(command)
        view: Any = self if scope is None else scope
        if scope is not None and scope.sandbox is not self:
            raise PolicyError("the scope belongs to another sandbox")
        if context is not None:
            context.check()
        if not view.supports(features.PROCESS_EXECUTE):
            raise CapabilityError("this sandbox (or scope) does not allow running programs")
        if not allow_subprocesses and not view.supports(features.PROCESS_SPAWN_DENIAL):
            raise CapabilityError(f"the {self.name} backend cannot deny subprocess creation; refusing to claim it")
        limits = self.limits.narrowed(**dict(requested_limits or {}))
        for limit_name in limits.process_limits():
            if not view.supports(_LIMIT_FEATURES[limit_name]):
                raise CapabilityError(f"the {self.name} backend cannot enforce {limit_name} on this host")
        self.workspace.validate()
        grants = self.process_grants(view)
        request = LaunchRequest(
            command=argv,
            grants=grants,
            network=view.network,
            environment=child_environment(self._effective_policy, self.workspace, environment, inherit_environment),
            cwd=working_directory(self.workspace, cwd, grants),
            limits=limits,
            allow_subprocesses=allow_subprocesses,
        )
        return request, self._launch(request)

    # -- backend hooks -----------------------------------------------------------------------

    def _enforceable(self, policy: Policy) -> Policy:
        """The policy this backend will enforce, or CapabilityError for a rule it cannot."""
        raise AbstractMethodError(f"{type(self).__name__} must say which policy it enforces (_enforceable)")

    def _open_backend(self, run: Any) -> None:
        """Check dependencies and start run-scoped resources."""

    def _close_backend(self) -> None:
        """Stop run-scoped resources."""

    def _launch(self, request: LaunchRequest) -> Launch:
        """The host command line that runs ``request`` confined by this backend."""
        raise AbstractMethodError(f"{type(self).__name__} must build its launch command (_launch)")
