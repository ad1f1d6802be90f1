"""One batch at a time per results file: an exclusive lock on ``--out``.

Every submit replaces its results file with a new one (lg_scheduler.batch_output),
so a second batch given the same ``--out`` would silently hide the first one's
results: the first keeps writing to the file it opened, which no longer has a
name. The second batch is refused up front instead, naming the batch that holds
the file.

The lock is a filelock ``FileLock`` (an ``flock``) on a hidden sibling file
(``.results.jsonl.lock`` for ``results.jsonl``), not on the results file itself,
because that file is replaced while the batch runs. The kernel releases it when the process dies, so
a killed batch never leaves its file locked; the sibling is removed when the
batch ends. A path that is not a regular file (``/dev/stdout``, a FIFO) is not
locked, and neither is one whose directory refuses the sibling (the batch then
runs unlocked, as before).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from lg_core.errors import InvocationError

HOLDER_BYTES = 4096  # more than a holder record ever takes


class OutputLock:
    """An exclusive claim on a results file for one batch, held until :meth:`release`."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = out.with_name(f".{out.name}.lock")
        self._lock: FileLock | None = None

    def acquire(self, batch_id: str, holder: str) -> dict[str, str] | None:
        """Take the lock, recording who holds it; returns the other holder's record if it is taken.

        A record of ``{}`` means the lock is held by a process that has not yet
        written who it is (it writes that right after taking the lock).
        """
        record = json.dumps({"batch_id": batch_id, "holder": holder}).encode()

        def write_holder(fd: int) -> None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)

        while True:
            lock = FileLock(
                self.path,
                blocking=False,
                thread_local=False,
                fallback_to_soft=False,
                mode=0o644,
                on_acquired=write_holder,
            )
            try:
                lock.acquire()
            except Timeout:
                other = _read_record(self.path)
                if other is None:  # its holder let go and removed it just now: try again
                    continue
                return other
            self._lock = lock
            return None

    def release(self) -> None:
        """Remove the sibling file while still holding it, then let go (filelock retries an unlinked file)."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        finally:
            lock.release()


@contextlib.contextmanager
def output_locked(out: Path | None, batch_id: str, holder: str) -> Iterator[None]:
    """Hold ``out``'s lock for ``batch_id`` while the block runs.

    Raises InvocationError when another batch holds it. The same batch holding
    it (a second submit of one batch) is let through: the batch's own claim then
    refuses a live submitter, or takes it over with ``force``, and the two
    submits write one batch's lines, as ``--force`` documents.
    """
    lock = _lock_for(out)
    other = None
    if lock is not None:
        try:
            other = lock.acquire(batch_id, holder)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
                raise
            lock = None  # no sibling can be made there: run unlocked
    if other is not None and other.get("batch_id") != batch_id:
        raise InvocationError(
            f"output file {out} is being written by batch {other.get('batch_id', '(starting)')} "
            f"(process {other.get('holder', 'unknown')}); wait for it to finish, or give this batch another --out"
        )
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def _lock_for(out: Path | None) -> OutputLock | None:
    if out is None or out.is_symlink() or (out.exists() and not out.is_file()):
        return None
    return OutputLock(out)


def _read_record(path: Path) -> dict[str, str] | None:
    """The holder record in the lock file; None if the file is gone."""
    try:
        with path.open("rb") as handle:
            data = handle.read(HOLDER_BYTES)
    except FileNotFoundError:
        return None
    try:
        record = json.loads(data or b"{}")
    except ValueError:  # half-written by a holder that is writing it right now
        return {}
    return record if isinstance(record, dict) else {}


__all__ = ["OutputLock", "output_locked"]
