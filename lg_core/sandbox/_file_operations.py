"""Bounded, symlink-safe file operations on the paths a Sandbox (or Scope) makes visible.

A path is a logical reference (``notes/today.md`` or ``workspace://skills/a.md``); a
physical absolute path is refused so tools never learn the host layout. The innermost
granted ``files`` path containing it decides visibility and access, so a read-only
directory nested in a writable root stays read-only and a runtime path (process-only)
is never reachable here. Every component is then opened relative to the granted
directory with ``O_NOFOLLOW``, so a symbolic link planted anywhere in the path is
refused instead of followed out of the workspace, and a write goes to a temporary
file renamed into place, which replaces a link at the destination rather than
writing through it. Errors are ToolErrors whose messages name only logical paths.
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from collections.abc import Callable
from typing import Any

from lg_core.errors import ToolError
from lg_core.sandbox import capabilities as features
from lg_core.sandbox.policy import Grant, nested_grants

Components = list[str]  # a path's components below its grant (``list`` is a method name in the classes)
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class FileOperations:
    """read, write, list and replace for one sandbox or scope ``view``."""

    def __init__(self, view: Any) -> None:
        self._view = view

    def read(self, path: str, context: Any = None) -> str:
        """The UTF-8 text of a file, refused past the read limit."""
        grant, parts = self._locate(path, features.FILESYSTEM_READ, context)
        limit = self._view.limits.read_bytes
        with _Opened(grant.path, parts, os.O_RDONLY, path) as fd:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ToolError(f"{path} is not a regular file")
            data = _read_at_most(fd, limit + 1)
        if len(data) > limit:
            raise ToolError(f"{path} is larger than the read limit of {limit} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{path} is not UTF-8 text") from None

    def write(self, path: str, content: str | bytes, context: Any = None) -> int:
        """Replace the file at ``path`` with ``content`` (parents created); the bytes written."""
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        limit = self._view.limits.write_bytes
        if len(data) > limit:
            raise ToolError(f"the content for {path} is larger than the write limit of {limit} bytes")
        grant, parts = self._locate(path, features.FILESYSTEM_WRITE, context)
        if not parts:
            raise ToolError(f"{path} is a directory")
        with _Opened(grant.path, parts[:-1], None, path, create_directories=True) as directory:
            temporary = f".{parts[-1]}.{uuid.uuid4().hex}.tmp"
            fd = os.open(
                temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=directory
            )
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.rename(temporary, parts[-1], src_dir_fd=directory, dst_dir_fd=directory)
            except BaseException:
                try:
                    os.unlink(temporary, dir_fd=directory)
                except OSError:
                    pass
                raise
        return len(data)

    def replace(self, path: str, old_text: str, new_text: str, context: Any = None) -> str:
        """Replace the one occurrence of ``old_text``; refuse when it occurs zero or several times."""
        if not old_text:
            raise ToolError("the text to replace must not be empty")
        self._locate(path, features.FILESYSTEM_WRITE, context)
        text = self.read(path, context)
        count = text.count(old_text)
        if count != 1:
            raise ToolError(f"the text to replace occurs {count} times in {path}; it must occur exactly once")
        updated = text.replace(old_text, new_text, 1)
        self.write(path, updated, context)
        return updated

    def list(self, path: str = ".", context: Any = None) -> str:
        """Sorted entries, one a line, directories ending in ``/``, bounded by the list limit."""
        grant, parts = self._locate(path, features.FILESYSTEM_LIST, context)
        limit = self._view.limits.list_entries
        hidden = self._hidden_entries(grant, parts)
        with _Opened(grant.path, parts, None, path) as fd:
            entries = []
            with os.scandir(fd) as scan:
                for entry in scan:
                    if entry.name in hidden:
                        continue
                    entries.append(entry.name + ("/" if entry.is_dir(follow_symlinks=False) else ""))
        entries.sort()
        if len(entries) > limit:
            entries = [*entries[:limit], f"... and {len(entries) - limit} more"]
        return "\n".join(entries)

    # -- internals ---------------------------------------------------------------------------

    def _locate(self, path: str, operation: str, context: Any) -> tuple[Grant, Components]:
        if context is not None:
            context.check()
        if not self._view.supports(operation):
            raise ToolError(f"this sandbox does not allow {operation.replace('_', ' ')}")
        if not isinstance(path, str):
            raise ToolError(f"a path must be a string, got {type(path).__name__}")
        workspace = self._view.workspace
        workspace.validate()
        try:
            target = workspace.resolve(path)
        except (KeyError, ValueError) as error:
            raise ToolError(str(error).strip("'\"")) from None
        grant = _innermost(nested_grants(workspace, self._view.files, self._view.runtime_paths), target)
        if grant is None or grant.process_only:
            raise ToolError(f"{path} is not inside a path this sandbox grants")
        if operation == features.FILESYSTEM_WRITE and not grant.writable:
            raise ToolError(f"{path} is read-only in this sandbox")
        relative = os.path.relpath(target, grant.path)
        return grant, [] if relative == "." else relative.split(os.sep)

    def _hidden_entries(self, grant: Grant, parts: Components) -> set[str]:
        """Names in this directory that are process-only runtime paths."""
        directory = os.path.join(grant.path, *parts)
        hidden = set()
        for other in nested_grants(self._view.workspace, self._view.files, self._view.runtime_paths):
            if other.process_only and os.path.dirname(other.path) == directory:
                hidden.add(os.path.basename(other.path))
        return hidden


class _Opened:
    """A descriptor for ``base/parts`` opened one component at a time without following links."""

    def __init__(
        self, base: str, parts: Components, flags: int | None, label: str, create_directories: bool = False
    ) -> None:
        self._base, self._parts, self._flags, self._label = base, parts, flags, label
        self._create = create_directories
        self._fd = -1

    def __enter__(self) -> int:
        try:
            fd = os.open(self._base, _DIRECTORY_FLAGS)
            directories = self._parts if self._flags is None else self._parts[:-1]
            for part in directories:
                fd = _step(fd, part, self._create)
            if self._flags is not None and self._parts:
                last = os.open(self._parts[-1], self._flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = last
        except OSError as error:
            raise ToolError(_describe(error, self._label)) from None
        self._fd = fd
        return fd

    def __exit__(self, *exc_info: object) -> None:
        os.close(self._fd)


def _step(fd: int, part: str, create: bool) -> int:
    try:
        if create:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
        return os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


def _innermost(grants: tuple[Grant, ...], target: str) -> Grant | None:
    matching = [g for g in grants if target == g.path or target.startswith(g.path.rstrip(os.sep) + os.sep)]
    return max(matching, key=lambda grant: len(grant.path)) if matching else None


def _read_at_most(fd: int, count: int) -> bytes:
    chunks: list[bytes] = []
    remaining = count
    read: Callable[[int, int], bytes] = os.read
    while remaining > 0 and (chunk := read(fd, min(remaining, 1 << 20))):
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _describe(error: OSError, label: str) -> str:
    if error.errno in (errno.ELOOP, errno.EMLINK) or (error.errno == errno.ENOTDIR and label):
        return f"{label} goes through a symbolic link or a non-directory, which the sandbox does not follow"
    if error.errno == errno.ENOENT:
        return f"{label} does not exist"
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"{label} is not accessible"
    if error.errno == errno.EISDIR:
        return f"{label} is a directory"
    return f"{label}: {error.strerror}"
