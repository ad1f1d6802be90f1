"""The observable result of one sandboxed process run to completion."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Execution:
    """Captured (bounded) output, the exit status, and why the run stopped early, if it did.

    ``error`` is set when the process did not complete on its own: a timeout or a
    supervised limit such as memory. ``exit_code`` is the command's status; a command
    ended by a signal reads as the negative signal number on the Unrestricted backend
    and as 128 plus the signal number under Bubblewrap, which reports it that way. ``stdout_truncated`` and
    ``stderr_truncated`` say whether output past the capture limit was dropped.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    error: BaseException | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def success(self) -> bool:
        """No execution error occurred and the exit code is zero."""
        return self.error is None and self.exit_code == 0
