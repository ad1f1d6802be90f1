"""Fault injection for the chaos tests (test-only; inert unless ``LG_FAULT`` is set).

The durable protocol claims a process may die at any instruction without
losing or repeating committed work. Most deaths can be caused from outside
(SIGKILL a worker), but one window is too narrow to hit that way: after a
step's commit and before its successors are published. ``point(name)`` marks
such a window; with ``LG_FAULT=<name>`` the process SIGKILLs itself there.

    LG_FAULT=after_commit           die at every such point in this process
    LG_FAULT_ONCE=/path/to/marker   ...but only the first time across processes
                                    (the marker file is created exclusively)

Never set these in production: they exist so tests can prove the outbox relay
recovers what a crash between commit and publish leaves behind.
"""

from __future__ import annotations

import os
import signal

ENV = "LG_FAULT"
ONCE_ENV = "LG_FAULT_ONCE"


def point(name: str) -> None:
    """Die here (SIGKILL, no cleanup) if ``LG_FAULT`` names this point."""
    if os.environ.get(ENV) != name:
        return
    marker = os.environ.get(ONCE_ENV)
    if marker:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["ENV", "ONCE_ENV", "point"]
