"""The observable result of one sandboxed process run to completion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lg_core.errors import SandboxLimitError

if TYPE_CHECKING:
    from lg_core.sandbox.process_session import ProcessSession


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


def run_to_completion(session: ProcessSession, timeout: float, context: Any = None) -> Execution:
    """Wait for ``session`` (bounded by ``timeout``), close it, and report what happened.

    A timeout or a supervised limit becomes the Execution's ``error``; a cancelled or
    expired ``context`` is not a result and propagates once the session is closed.
    """
    error: BaseException | None = None
    exit_code: int | None = None
    try:
        exit_code = session.wait(timeout=timeout, context=context)
    except (TimeoutError, SandboxLimitError) as stopped:
        error, exit_code = stopped, session.returncode
    finally:
        stdout, stderr = session.drain(0.5)
        truncated = session.truncated
        session.close()
    return Execution(
        stdout=stdout.decode("utf-8", "replace"),
        stderr=stderr.decode("utf-8", "replace"),
        exit_code=exit_code,
        error=error,
        stdout_truncated=truncated["stdout"],
        stderr_truncated=truncated["stderr"],
    )
