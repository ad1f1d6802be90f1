"""FilesystemSessionStore: one JSON file per session in an application-owned directory.

Durable across restarts, and safe for several processes sharing the root:
each write holds an exclusive ``flock`` on the session's lock file, writes a
temporary file, fsyncs it and renames it over the snapshot, so a reader sees
the old snapshot or the new one, never half of one. File names are SHA-256
digests of the session id, so ids never become paths. The file records the
actor whose write created it, and every read and write compares it under the
lock: of two actors racing to create one session, one writes it and the other
gets SessionActorError, in one process or several.

A root in the per-actor layout names a file by the digest of (actor, session id),
so one id can hold several actors' sessions. Opening such a root renames its files
once, under a root-wide lock, and records the layout in ``.layout``; a root
where one session id has files of several actors is refused, naming the files,
because which conversation keeps the id is the application's decision.

The root holds readable, unencrypted session data, so it must be a private
directory (no group or other permissions) that is not a symbolic link; the
store creates it that way when it is missing.

Locks are ``fcntl.flock`` by hand: reads share them, and filelock has no shared flock (its ReadWriteLock is SQLite).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lg_core.errors import ConfigurationError, ProtocolError, SessionActorError
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
LAYOUT = 2  # files named by session id; 1 (no .layout file): by actor and session id
_DIGEST_FILE = re.compile(r"[0-9a-f]{64}\.json")


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
        _upgrade_layout(self.root)

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
            _refuse_another_owner(_read_json(self._path(key)), key)
            self._write(key, snapshot)
        return snapshot

    # -- files ---------------------------------------------------------------------------

    def _path(self, key: SessionKey) -> Path:
        """The session's file: one per session id, whichever actor names it."""
        return self.root / _file_name(key[0])

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
        """The session's snapshot (under its lock); SessionActorError when another actor owns it."""
        path = self._path(key)
        data = _read_json(path)
        if data is None:
            return None
        _refuse_another_owner(data, key)
        return _snapshot_of(data, key, path)

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


def _file_name(session_id: str) -> str:
    return f"{hashlib.sha256(session_id.encode()).hexdigest()}.json"


def _earlier_file_name(session_id: str, actor_id: str | None) -> str:
    """The file name layout 1 gave a session: never another session's current name, as an id holds no NUL."""
    named = f"{actor_id or ''}\x00{session_id}"
    return f"{hashlib.sha256(named.encode()).hexdigest()}.json"


def _upgrade_layout(root: Path) -> None:
    """Rename layout 1's files (one per actor and session id) to one per session id, once per root."""
    marker = root / ".layout"
    if _layout_of(marker) == LAYOUT:
        return
    lock_path = root / ".layout.lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        _flock(fd, fcntl.LOCK_EX, lock_path)
        if _layout_of(marker) == LAYOUT:  # another process upgraded it meanwhile
            return
        for source, target in _earlier_files(root):
            os.replace(source, target)
        _write_atomically(root, marker, {"layout": LAYOUT})
    except OSError as exc:
        raise UnusableRootError(f"cannot upgrade the session store root {root} to its current layout: {exc}") from None
    finally:
        os.close(fd)


def _layout_of(marker: Path) -> Any:
    try:
        data = _read_json(marker)
    except ProtocolError:
        return None
    return data.get("layout") if isinstance(data, dict) else None


def _earlier_files(root: Path) -> list[tuple[Path, Path]]:
    """``(file, its current name)`` for each layout 1 file; UnusableRootError when an id has several actors."""
    found: defaultdict[str, list[tuple[str | None, Path]]] = defaultdict(list)
    for path in root.iterdir():
        try:
            data = _read_json(path) if _DIGEST_FILE.fullmatch(path.name) else None
        except ProtocolError:
            continue  # unreadable: no session a load could return before either
        if isinstance(data, dict) and isinstance(data.get("id"), str) and path.name != _file_name(data["id"]):
            found[data["id"]].append((data.get("actor_id"), path))
    shared = sorted(path.name for entries in found.values() if len(entries) > 1 for _actor, path in entries)
    if shared:
        raise UnusableRootError(
            f"session store root {root} holds session ids with the sessions of several actors "
            f"(files {', '.join(shared)}), "
            "and a session id now belongs to one actor: move all but one actor's file of each id out of the root, "
            "then open the store again"
        )
    return [
        (path, root / _file_name(session_id))
        for session_id, [(actor, path)] in found.items()
        if path.name == _earlier_file_name(session_id, actor) and not (root / _file_name(session_id)).exists()
    ]


def _read_json(path: Path) -> Any:
    """The parsed JSON of ``path``, None when there is no such file."""
    try:
        raw = _read_regular_file(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ProtocolError(f"cannot read session file {path}: {exc}") from None
    try:
        return json.loads(raw.decode("utf-8"))  # UnicodeDecodeError is a ValueError
    except ValueError as exc:
        raise ProtocolError(f"session file {path} is not a valid snapshot: {exc}") from None


def _refuse_another_owner(data: Any, key: SessionKey) -> None:
    """SessionActorError when ``data``, the session's file, records another actor as its owner."""
    if isinstance(data, dict) and data.get("id") == key[0] and data.get("actor_id", key[1]) != key[1]:
        raise SessionActorError.for_session(key[0])


def _snapshot_of(data: Any, key: SessionKey, path: Path) -> SessionSnapshot:
    """The snapshot a session file holds, checked to be ``key``'s and in this format."""
    try:
        if data.get("v") != FORMAT_VERSION or [data["id"], data["actor_id"]] != list(key):
            raise ValueError("the file belongs to another session or format version")
        messages = tuple(Message.from_dict(m) for m in data["messages"])
        return SessionSnapshot(messages, dict(data["state"]), dict(data["metadata"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"session file {path} is not a valid snapshot: {exc}") from None


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
