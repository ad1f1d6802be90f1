"""Scope: a non-owning view of a Sandbox that can only narrow it.

A Scope removes paths, turns read-write access into read-only, removes capabilities or
narrows networking, for one agent or tool set. Any attempt to widen its parent (a path
the parent does not grant, write access the parent does not give, a network mode or
endpoint beyond the parent's, a capability the parent lacks) raises PolicyError, so a
Scope built from model- or tool-supplied options cannot escalate. It constrains only
code that receives and uses it; whoever keeps the parent Sandbox keeps its authority.
A Scope owns nothing: opening and closing it do nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lg_core.errors import PolicyError
from lg_core.sandbox import capabilities as features
from lg_core.sandbox._file_operations import FileOperations
from lg_core.sandbox.capabilities import Capabilities
from lg_core.sandbox.network_policy import NetworkPolicy
from lg_core.sandbox.policy import READ_ONLY, READ_WRITE, access_map, nested_grants

if TYPE_CHECKING:
    from lg_core.sandbox.execution import Execution
    from lg_core.sandbox.limits import Limits
    from lg_core.sandbox.policy import Policy
    from lg_core.sandbox.process_session import ProcessSession
    from lg_core.sandbox.sandbox import Sandbox
    from lg_core.workspace import Workspace


class Scope:
    """A capability-reduced view of a Sandbox (or of another Scope)."""

    def __init__(
        self,
        sandbox: Sandbox,
        files: Mapping[str, str] | Iterable[str] | None = None,
        runtime_paths: Mapping[str, str] | Iterable[str] | None = None,
        capabilities: Iterable[str] | Capabilities | None = None,
        network: NetworkPolicy | str | bool | Mapping[str, Any] | None = None,
        parent_scope: Scope | None = None,
    ) -> None:
        parent: Any = parent_scope if parent_scope is not None else sandbox
        self.sandbox: Sandbox = sandbox
        if parent_scope is not None and parent_scope.sandbox is not sandbox:
            raise PolicyError("a scope's parent scope must belong to the same sandbox")
        self.files = _narrowed_paths(files, parent.files, "files")
        self.runtime_paths = _narrowed_paths(runtime_paths, parent.runtime_paths, "runtime_paths")
        self._capabilities = _narrowed_capabilities(capabilities, parent.capabilities())
        self.network = _narrowed_network(network, parent.network)

    # -- the view ----------------------------------------------------------------------------

    @property
    def workspace(self) -> Workspace:
        return self.sandbox.workspace

    @property
    def policy(self) -> Policy:
        """The policy the parent sandbox enforces."""
        return self.sandbox.effective_policy

    effective_policy = policy

    def capabilities(self) -> Capabilities:
        """The operations this scope exposes."""
        return self._capabilities

    def supports(self, feature: str, value: str | None = None) -> bool:
        return self._capabilities.supports(feature, value)

    def allows(self, operation: str, path: str | None = None) -> bool:
        """Whether ``operation`` is available through this scope, at virtual ``path`` when given."""
        return allows_operation(self, operation, path)

    @property
    def writable(self) -> bool:
        """Whether any visible path accepts writes through this scope."""
        return READ_WRITE in self.files.values() and self.supports(features.FILESYSTEM_WRITE)

    def scope(self, **narrowing: Any) -> Scope:
        """Another view that can only narrow this one."""
        return Scope(self.sandbox, parent_scope=self, **narrowing)

    def validate(self) -> None:
        """Fail closed when a directory this scope grants was replaced since the workspace opened."""
        self.workspace.validate()

    @property
    def limits(self) -> Limits:
        """The parent sandbox's limits, which a scope shares."""
        return self.sandbox.limits

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

    # -- operations, through the parent ------------------------------------------------------

    def execute(self, command: str, **options: Any) -> Execution:
        if not isinstance(command, str) or not command:
            raise ValueError("a shell command must be a non-empty string")
        return self.execute_program(["/bin/sh", "-c", command], **options)

    def execute_program(self, command: Sequence[str], **options: Any) -> Execution:
        return self.sandbox.execute_program(command, scope=self, **options)

    def start_program(self, command: Sequence[str], **options: Any) -> ProcessSession:
        return self.sandbox.start_program(command, scope=self, **options)

    def open(self, run: Any = None) -> Scope:
        """Scopes own no resources; opening returns the same scope."""
        return self

    def close(self) -> None:
        """Scopes own no resources; closing does nothing."""


def allows_operation(view: Any, operation: str, path: str | None) -> bool:
    """Whether a sandbox or scope offers ``operation``, and at virtual ``path`` when given.

    The innermost granted path containing ``path`` decides; its access is already the
    most restrictive one covering it, so a write needs every covering grant writable.
    """
    if not view.supports(operation):
        return False
    if path is None:
        return True
    try:
        target = view.workspace.resolve(path)
    except (KeyError, ValueError):
        return False
    matching = [
        grant
        for grant in nested_grants(view.workspace, view.files, {})
        if target == grant.path or target.startswith(grant.path.rstrip(os.sep) + os.sep)
    ]
    if not matching:
        return False
    innermost = max(matching, key=lambda grant: len(grant.path))
    return innermost.writable or operation != features.FILESYSTEM_WRITE


def _narrowed_paths(requested: Any, parent: Mapping[str, str], label: str) -> Mapping[str, str]:
    if requested is None:
        return dict(parent)
    if isinstance(requested, Mapping):
        wanted = access_map(requested, label)
    else:
        wanted = {name: parent.get(name, READ_ONLY) for name in access_map(requested, label)}
    for name, access in wanted.items():
        if name not in parent:
            raise PolicyError(f"a scope cannot add {label} path {name!r}: its parent does not grant it")
        if access == READ_WRITE and parent[name] != READ_WRITE:
            raise PolicyError(f"a scope cannot make {label} path {name!r} writable: its parent grants it read-only")
    return wanted


def _narrowed_capabilities(requested: Any, parent: Capabilities) -> Capabilities:
    if requested is None:
        return parent
    names = requested.features if isinstance(requested, Capabilities) else {str(name) for name in requested}
    extra = sorted(set(names) - parent.features)
    if extra:
        raise PolicyError(f"a scope cannot add capabilities {extra}: its parent does not offer them")
    return Capabilities(names, parent.network_modes, parent.isolation)


def _narrowed_network(requested: Any, parent: NetworkPolicy) -> NetworkPolicy:
    if requested is None:
        return parent
    network = NetworkPolicy.coerce(requested)
    assert network is not None
    if not network.narrows(parent):
        raise PolicyError(f"a scope cannot widen network access from {parent.mode!r} to {network.mode!r}")
    return network
