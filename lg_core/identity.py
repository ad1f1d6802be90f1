"""Who holds a lease: host, process id and process start time.

A holder string names one process incarnation, so a reused pid is not
mistaken for the original process. On the same host we can tell at once
whether a holder is gone (DESIGN 4.2: a killed process must not cost a whole
lease period); on another host we can only wait for its lease to expire.
"""

from __future__ import annotations

import os
import socket
import threading
from functools import lru_cache


def _start_time(pid: int) -> str | None:
    """The process start time (clock ticks since boot), or None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return fields[19].decode()  # field 22 of stat


@lru_cache(maxsize=1)
def hostname() -> str:
    return socket.gethostname()


_local = threading.local()


def current_holder() -> str:
    """``host:pid:start`` for this process (recomputed after fork)."""
    pid = os.getpid()
    cached = getattr(_local, "holder", None)
    if cached is None or cached[0] != pid:
        cached = (pid, f"{hostname()}:{pid}:{_start_time(pid) or '0'}")
        _local.holder = cached
    return cached[1]


def holder_is_dead(holder: str | None) -> bool:
    """True only when ``holder`` is a process on this host that no longer exists."""
    if not holder:
        return False
    host, _, rest = holder.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != hostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return holder != current_holder()
    actual = _start_time(pid)
    return actual is None or (start not in ("", "0") and actual != start)


__all__ = ["current_holder", "holder_is_dead", "hostname"]
