"""A Workspace: the host directories one Run works in, under stable logical names.

    workspace = Workspace(root="/var/lib/support/run-481",
                          paths={"source": "/srv/support/source", "skills": "skills"})
    workspace.open()
    workspace.resolve("workspace://skills/refunds/SKILL.md")

``root`` is the default working directory. Relative named paths live beneath it and
are created when the Workspace opens; absolute ones are references the application
supplies on purpose and must exist once the setup callback has run. Opening resolves
every directory's real path and records its device and inode, so two names for one
directory are refused and a directory replaced later (a rename, a symlink swap) is
caught by :meth:`Workspace.validate` before a sandboxed process is given it: the
Sandbox fails closed instead of granting whatever now sits at that path.

Object lifetime and file lifetime are separate: closing calls the teardown callback
once and deletes nothing by itself.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from lg_core.errors import SandboxConfigurationError

REFERENCE_SCHEME = "workspace://"
ROOT_NAME = "root"
ENVIRONMENT_PREFIX = "LITTLE_GHOST_WORKSPACE_"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

Callback = Callable[..., Any]


@dataclass(frozen=True)
class DirectoryIdentity:
    """Which physical directory a name referred to when the Workspace opened."""

    real_path: str
    device: int
    inode: int


class Workspace:
    """Named host paths for one Run, with setup and teardown callbacks."""

    _providers: dict[str, Callable[..., Workspace]] = {}

    def __init__(
        self,
        root: str | os.PathLike[str],
        paths: Mapping[str, str | os.PathLike[str]] | None = None,
        setup: Callback | None = None,
        teardown: Callback | None = None,
    ) -> None:
        self.root = os.path.abspath(os.path.expanduser(os.fspath(root)))
        self.paths: Mapping[str, str] = MappingProxyType(
            {name: self._declared_path(name, path) for name, path in dict(paths or {}).items()}
        )
        self._setup = setup
        self._teardown = teardown
        self._lock = threading.Lock()
        self._identities: dict[str, DirectoryIdentity] = {}
        self._open_attempted = False
        self._closed = False

    # -- providers ---------------------------------------------------------------------------

    @classmethod
    def register_provider(cls, name: str, implementation: Callable[..., Workspace]) -> None:
        """Register a trusted factory (a Workspace class or callable) under a configuration name."""
        cls._providers[str(name)] = implementation

    @classmethod
    def resolve_provider(cls, name: str) -> Callable[..., Workspace]:
        """The factory registered as ``name``; an unknown name is an error, never a default."""
        try:
            return cls._providers[str(name)]
        except KeyError:
            known = ", ".join(sorted(cls._providers)) or "none"
            raise KeyError(f"no workspace provider named {name!r} (registered: {known})") from None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | Callable[..., Workspace], **context: Any) -> Workspace:
        """A workspace from configuration: a factory called with ``context``, or a mapping
        ``{"provider": "directory", "root": ..., "paths": ..., "setup": ..., "teardown": ...}``."""
        if callable(settings) and not isinstance(settings, Mapping):
            workspace = settings(**context)
            if not isinstance(workspace, Workspace):
                raise TypeError(f"a workspace factory must return a Workspace, got {type(workspace).__name__}")
            return workspace
        if not isinstance(settings, Mapping):
            raise TypeError(f"workspace settings must be a mapping or a factory, got {type(settings).__name__}")
        options = dict(settings)
        factory = cls.resolve_provider(options.pop("provider", "directory"))
        try:
            return factory(**options)
        except TypeError as error:
            raise TypeError(f"invalid workspace settings: {error}") from None

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self, run: Any = None) -> Workspace:
        """Create the root and relative paths, run setup once, then pin every directory's identity."""
        with self._lock:
            if self._closed:
                raise SandboxConfigurationError("this workspace is closed and cannot be opened again")
            if self._open_attempted:
                if not self._identities:
                    raise SandboxConfigurationError("this workspace failed to open; close it and build a new one")
                return self
            self._open_attempted = True
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        real_root = os.path.realpath(self.root)
        for name, path in self.paths.items():
            if _is_beneath(path, self.root):
                if not _is_beneath(os.path.realpath(path), real_root):
                    raise SandboxConfigurationError(f"relative workspace path {name!r} resolves outside the root")
                os.makedirs(path, mode=0o700, exist_ok=True)
        if self._setup is not None:
            self._setup(workspace=self, run=run)
        self._identities = self._pin_identities()
        return self

    def close(self, run: Any = None) -> None:
        """Call the teardown callback once (also after a failed or partial open); delete nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            attempted = self._open_attempted
        if attempted and self._teardown is not None:
            self._teardown(workspace=self, run=run)

    @property
    def has_teardown(self) -> bool:
        """Whether a teardown callback was given, for callers that cannot promise to call it once."""
        return self._teardown is not None

    @property
    def opened(self) -> bool:
        """Whether :meth:`open` completed, so real paths and identities are known."""
        return bool(self._identities)

    def validate(self) -> None:
        """Fail closed when a configured directory was replaced, moved or removed since :meth:`open`."""
        if not self._identities:
            raise SandboxConfigurationError("the workspace is not open; call open() before using its paths")
        for name, pinned in self._identities.items():
            declared = self.root if name == ROOT_NAME else self.paths[name]
            try:
                current = _identity_of(declared)
            except OSError as error:
                raise SandboxConfigurationError(
                    f"workspace path {name!r} ({declared}) is no longer usable: {error.strerror}"
                ) from None
            if current != pinned:
                raise SandboxConfigurationError(
                    f"workspace path {name!r} ({declared}) was replaced after the workspace opened; "
                    "refusing to use a directory other than the one configured"
                )

    validate_ = validate

    # -- names and paths ---------------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        """``root`` followed by the named paths, in declaration order."""
        return (ROOT_NAME, *self.paths)

    def path(self, name: str) -> str:
        """The declared absolute path of ``name`` (``root`` included); KeyError when absent."""
        if name == ROOT_NAME:
            return self.root
        try:
            return self.paths[name]
        except KeyError:
            raise KeyError(f"workspace has no path named {name!r} (names: {', '.join(self.names)})") from None

    def real_path(self, name: str) -> str:
        """The physical directory ``name`` resolved to when the Workspace opened."""
        self.path(name)
        if not self._identities:
            raise SandboxConfigurationError("the workspace is not open; real paths are resolved by open()")
        return self._identities[name].real_path

    @property
    def real_paths(self) -> Mapping[str, str]:
        """Every name (``root`` included) and its resolved physical directory."""
        if not self._identities:
            raise SandboxConfigurationError("the workspace is not open; real paths are resolved by open()")
        return MappingProxyType({name: identity.real_path for name, identity in self._identities.items()})

    def environment(self) -> dict[str, str]:
        """What a sandboxed child learns of the Workspace: its real root and one variable per name."""
        real = self.real_paths
        variables = {f"{ENVIRONMENT_PREFIX}ROOT": real[ROOT_NAME]}
        for name in self.paths:
            variables[f"{ENVIRONMENT_PREFIX}{name.upper()}"] = real[name]
        return variables

    def reference(self, physical_path: str | os.PathLike[str]) -> str:
        """The logical reference of a physical path: root-relative, or ``workspace://name/...``.

        The most specific named path wins, so a file under a named path nested in the
        root is referred to by that name.
        """
        target = os.path.abspath(os.fspath(physical_path))
        best: tuple[str, str] | None = None
        for name, base in self._bases().items():
            if _is_beneath(target, base) and (best is None or len(base) > len(best[1])):
                best = (name, base)
        if best is None:
            raise ValueError(f"{target} is not inside any path of this workspace")
        name, base = best
        relative = os.path.relpath(target, base)
        relative = "" if relative == "." else relative
        if name == ROOT_NAME:
            return relative or "."
        return f"{REFERENCE_SCHEME}{name}/{relative}" if relative else f"{REFERENCE_SCHEME}{name}"

    def resolve(self, reference: str) -> str:
        """The physical path of a logical reference, checked for lexical containment only.

        Physical absolute paths are refused so callers never learn the host layout; this
        does not make direct access safe for untrusted input (symlinks are not followed
        here), which is what the Sandbox's own file operations are for.
        """
        if not isinstance(reference, str) or not reference or "\0" in reference:
            raise ValueError(f"a workspace reference must be a non-empty string, got {reference!r}")
        if reference.startswith(REFERENCE_SCHEME):
            name, _, relative = reference[len(REFERENCE_SCHEME) :].partition("/")
            base = self._bases().get(name)
            if base is None or name == ROOT_NAME:
                raise KeyError(f"workspace has no path named {name!r} (reference {reference!r})")
        elif os.path.isabs(reference):
            raise ValueError(
                f"{reference!r} is a physical absolute path; use a root-relative path or workspace://name/path"
            )
        else:
            base, relative = self._bases()[ROOT_NAME], reference
        if relative.startswith("/") or ".." in relative.split("/"):
            raise ValueError(f"{reference!r} leaves its workspace path")
        return os.path.normpath(os.path.join(base, relative)) if relative else base

    # -- internals ---------------------------------------------------------------------------

    def _declared_path(self, name: Any, path: str | os.PathLike[str]) -> str:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"workspace path name {name!r} must be lower-case letters, digits and underscores")
        if name == ROOT_NAME:
            raise ValueError("'root' names the workspace root itself and cannot be a named path")
        text = os.path.expanduser(os.fspath(path))
        if not text:
            raise ValueError(f"workspace path {name!r} is empty")
        if os.path.isabs(text):
            return os.path.normpath(text)
        absolute = os.path.normpath(os.path.join(self.root, text))
        if not _is_beneath(absolute, self.root) or absolute == self.root:
            raise ValueError(f"relative workspace path {name!r} ({text}) must stay beneath the root")
        return absolute

    def _bases(self) -> dict[str, str]:
        if self._identities:
            return dict(self.real_paths)
        return {ROOT_NAME: self.root, **self.paths}

    def _pin_identities(self) -> dict[str, DirectoryIdentity]:
        identities: dict[str, DirectoryIdentity] = {}
        owners: dict[tuple[int, int], str] = {}
        for name in self.names:
            declared = self.path(name)
            try:
                identity = _identity_of(declared)
            except FileNotFoundError:
                raise SandboxConfigurationError(
                    f"workspace path {name!r} ({declared}) does not exist; absolute paths must exist "
                    "when the workspace opens (a setup callback can create them)"
                ) from None
            except OSError as error:
                raise SandboxConfigurationError(f"workspace path {name!r} ({declared}): {error.strerror}") from None
            if name in self.paths and _is_beneath(self.paths[name], self.root):
                root_real = identities[ROOT_NAME].real_path
                if not _is_beneath(identity.real_path, root_real):
                    raise SandboxConfigurationError(
                        f"relative workspace path {name!r} resolves to {identity.real_path}, outside the root"
                    )
            key = (identity.device, identity.inode)
            if key in owners:
                raise SandboxConfigurationError(
                    f"workspace paths {owners[key]!r} and {name!r} name the same directory ({identity.real_path})"
                )
            owners[key] = name
            identities[name] = identity
        return identities

    def __repr__(self) -> str:
        return f"Workspace(root={self.root!r}, paths={dict(self.paths)!r})"


def _identity_of(path: str) -> DirectoryIdentity:
    real = os.path.realpath(path, strict=True)
    status = os.stat(real)
    if not os.path.isdir(real):
        raise NotADirectoryError(20, "not a directory", path)
    return DirectoryIdentity(real_path=real, device=status.st_dev, inode=status.st_ino)


def _is_beneath(path: str, base: str) -> bool:
    """Whether ``path`` is ``base`` or lies under it, compared lexically."""
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


Workspace.register_provider("directory", Workspace)
