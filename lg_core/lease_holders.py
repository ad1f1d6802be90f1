"""Who holds a lease: host, process id and process start time.

A holder string names one process incarnation, so a reused pid is not
mistaken for the original process. On the same host we can tell at once
whether a holder is gone (so a killed process does not cost a whole lease
period); on another host we can only wait for its lease to expire.
"""

from __future__ import annotations

import os
import socket
import threading
from functools import lru_cache

import psutil

_UNREADABLE = "?"  # the process exists but its start time is hidden from us (/proc mounted hidepid)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_start_time(pid: int) -> str | None:
    """The process start time in clock ticks since boot; None if it is gone or a zombie;
    ``_UNREADABLE`` if it exists but the system does not show it to us (``hidepid``)."""
    try:
        process = psutil.Process(pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        # Since boot, not since the epoch: create_time() moves when the wall clock is set, the difference does not.
        since_boot = process.create_time() - psutil.boot_time()
    except psutil.ZombieProcess:
        return None
    except psutil.AccessDenied:
        return _UNREADABLE
    except (psutil.NoSuchProcess, OSError):
        return _UNREADABLE if _exists(pid) else None
    return str(round(since_boot * _CLOCK_TICKS))


def _exists(pid: int) -> bool:
    """Whether a process ``pid`` exists, even one of another user that /proc hides.

    Hand-written: psutil.pid_exists() falls back to listing /proc, which hidepid hides.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_namespace() -> str | None:
    """Linux's PID namespace of this process (hand-written: psutil does not report namespaces)."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    digits = "".join(ch for ch in link if ch.isdigit())
    return digits or None


@lru_cache(maxsize=1)
def hostname() -> str:
    """Where a holder's pid can be checked: this host's name and its PID namespace.

    Containers that share the host's name (``network_mode: host``) run in PID
    namespaces of their own, where another container's pid means nothing: the
    namespace in the name keeps such a holder from being judged dead at once
    (it waits for its lease instead, like a holder on another host).
    """
    name = socket.gethostname()
    namespace = _pid_namespace()
    return f"{name}#{namespace}" if namespace else name


_local = threading.local()


def current_holder() -> str:
    """``host:pid:start`` for this process (recomputed after fork)."""
    pid = os.getpid()
    cached = getattr(_local, "holder", None)
    if cached is None or cached[0] != pid:
        cached = (pid, f"{hostname()}:{pid}:{process_start_time(pid) or '0'}")
        _local.holder = cached
    return cached[1]


def holder_is_local(holder: str | None) -> bool:
    """Whether ``holder`` names a process on this host (in this PID namespace), whose pid can be checked."""
    return bool(holder) and str(holder).partition(":")[0] == hostname()


def holder_is_dead(holder: str | None) -> bool:
    """True only when ``holder`` is a process on this host that no longer exists."""
    if not holder or not holder_is_local(holder):
        return False
    _host, _, rest = holder.partition(":")
    pid_text, _, start = rest.partition(":")
    if not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return holder != current_holder()
    actual = process_start_time(pid)
    if actual == _UNREADABLE:  # alive; a reused pid cannot be told apart here, so presume it is the holder
        return False
    return actual is None or (start not in ("", "0") and actual != start)


__all__ = ["current_holder", "holder_is_dead", "holder_is_local", "hostname", "process_start_time"]
