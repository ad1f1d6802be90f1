"""FilesystemSessionStore: one JSON file per session in an application-owned directory.

Durable across restarts, and safe for several processes sharing the root:
each write holds an exclusive ``flock`` on the session's lock file, writes a
temporary file, fsyncs it and renames it over the snapshot, so a reader sees
the old snapshot or the new one, never half of one. File names are SHA-256
digests of (actor, session id): ids never become paths, and one actor's
session cannot be opened under another actor's name.

The root holds readable, unencrypted session data, so it must be a private
directory (no group or other permissions) that is not a symbolic link; the
store creates it that way when it is missing.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lg_core.errors import ConfigurationError, ProtocolError
from lg_core.messages import Message
from lg_core.sessions.base import (
    SessionKey,
    SessionSnapshot,
    SessionStore,
    check_expected_count,
    count_conflict,
    session_key,
)

FORMAT_VERSION = 1


class UnusableRootError(ConfigurationError, ValueError):
    """The root cannot hold sessions safely (a symbolic link, not a directory, shared).

    The spec raises ArgumentError here, which is ValueError in Python, so code
    ported from it (``except ValueError``) catches it; it is also a
    ConfigurationError, since the root usually comes from ``configure(session_store=...)``.
    """


class FilesystemSessionStore(SessionStore):
    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self.root = _private_root(Path(root))

    def load(self, id: str, actor_id: str | None = None) -> SessionSnapshot | None:
        key = session_key(id, actor_id)
        with self._locked(key, fcntl.LOCK_SH):
            return self._read(key)

    def append(
        self,
        id: str,
        *,
        messages: Iterable[Any],
        state: Mapping[str, Any] | None,
        metadata: Mapping[str, Any] | None,
        expected_count: int,
        actor_id: str | None = None,
    ) -> SessionSnapshot:
        key, kept, state_data, meta = self._prepare(id, actor_id, messages, state, metadata)
        expected = check_expected_count(expected_count)
        with self._locked(key, fcntl.LOCK_EX):
            current = self._read(key)
            stored = () if current is None else current.messages
            if len(stored) != expected:
                raise count_conflict(key, len(stored), expected)
            snapshot = SessionSnapshot(stored + kept, state_data, meta)
            self._write(key, snapshot)
        return snapshot

    def replace(
        self,
        id: str,
        *,
        messages: Iterable[Any],
        state: Mapping[str, Any] | None,
        metadata: Mapping[str, Any] | None,
        actor_id: str | None = None,
    ) -> SessionSnapshot:
        key, kept, state_data, meta = self._prepare(id, actor_id, messages, state, metadata)
        snapshot = SessionSnapshot(kept, state_data, meta)
        with self._locked(key, fcntl.LOCK_EX):
            self._write(key, snapshot)
        return snapshot

    # -- files ---------------------------------------------------------------------------

    def _path(self, key: SessionKey) -> Path:
        session_id, actor_id = key
        digest = hashlib.sha256(f"{actor_id or ''}\x00{session_id}".encode()).hexdigest()
        return self.root / f"{digest}.json"

    @contextmanager
    def _locked(self, key: SessionKey, mode: int) -> Iterator[None]:
        """This instance's per-session lock, then the cross-process file lock."""
        with self.synchronize(*key):
            lock_path = self._path(key).with_suffix(".lock")
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as exc:
                raise ProtocolError(f"cannot lock session file {lock_path}: {exc}") from None
            try:
                _flock(fd, mode, lock_path)
                yield
            finally:
                os.close(fd)  # closing the descriptor releases the flock

    def _read(self, key: SessionKey) -> SessionSnapshot | None:
        path = self._path(key)
        try:
            raw = _read_regular_file(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ProtocolError(f"cannot read session file {path}: {exc}") from None
        try:
            data = json.loads(raw.decode("utf-8"))  # UnicodeDecodeError is a ValueError
            if data.get("v") != FORMAT_VERSION or [data["id"], data["actor_id"]] != list(key):
                raise ValueError("the file belongs to another session or format version")
            messages = tuple(Message.from_dict(m) for m in data["messages"])
            return SessionSnapshot(messages, dict(data["state"]), dict(data["metadata"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProtocolError(f"session file {path} is not a valid snapshot: {exc}") from None

    def _write(self, key: SessionKey, snapshot: SessionSnapshot) -> None:
        data = {
            "v": FORMAT_VERSION,
            "id": key[0],
            "actor_id": key[1],
            "messages": [m.to_dict() for m in snapshot.messages],
            "state": snapshot.state,
            "metadata": snapshot.metadata,
        }
        path = self._path(key)
        try:
            _write_atomically(self.root, path, data)
        except OSError as exc:
            # The spec: ProtocolError when the snapshot cannot be written; the old one stays.
            raise ProtocolError(f"cannot write session file {path}: {exc}") from None


def _read_regular_file(path: Path) -> bytes:
    """The bytes of ``path``, refusing a symbolic link or anything but a regular file.

    The store only ever renames regular files into place, so anything else was
    planted (a link to data outside the private root, a FIFO that would block
    every reader): an unsafe snapshot, which the spec makes a ProtocolError.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ProtocolError(f"session file {path} is not a regular file (a symbolic link); remove it") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ProtocolError(f"session file {path} is not a regular file; remove it")
        return handle.read()


def _write_atomically(root: Path, path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to a temporary file, fsync it and rename it over ``path``."""
    fd, temporary = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, separators=(",", ":"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with _quietly():
            os.unlink(temporary)
        raise
    _fsync_directory(root)


def _flock(fd: int, mode: int, path: Path) -> None:
    """Take the cross-process lock; a filesystem without locking is a ProtocolError."""
    try:
        fcntl.flock(fd, mode)
    except OSError as exc:
        raise ProtocolError(f"cannot lock session file {path} (shared roots need file locking): {exc}") from None


def _private_root(root: Path) -> Path:
    """Create ``root`` private, or check an existing one is a private, real directory."""
    if root.is_symlink():
        raise UnusableRootError(f"session store root {root} is a symbolic link; point it at the real directory")
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = root.stat()
    except OSError as exc:
        raise UnusableRootError(f"cannot create the session store root {root}: {exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UnusableRootError(f"session store root {root} is not a directory")
    if info.st_mode & 0o077:
        raise UnusableRootError(
            f"session store root {root} is readable by other users (mode {stat.S_IMODE(info.st_mode):o}); "
            f"it holds conversations: chmod 700 {root}"
        )
    return root.resolve()


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def _quietly() -> Iterator[None]:
    try:
        yield
    except OSError:
        pass


__all__ = ["FilesystemSessionStore", "UnusableRootError"]
