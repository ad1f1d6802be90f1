"""Session: the one active code-mode program of an agent's call, and its limits.

``execute`` starts a fresh program (a new interpreter in a new sandbox over a
new temporary workspace) and watches it for at most the observation window
(one minute); ``wait`` watches an active program for another window; ``stop``
ends it. Each returns a ProgramResult with the output produced since the
previous observation; a final status (``completed``, ``error``,
``terminated``) closes the program and frees everything it held. A program's
total lifetime (``wall_seconds``) starts at ``execute`` and is enforced by the
program's own pump, whether or not anyone waits. One control operation runs
at a time; host and cleanup failures raise instead of becoming a result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from lg_core.code_mode._program import Program
from lg_core.code_mode.broker import Broker
from lg_core.code_mode.program_result import ProgramResult
from lg_core.errors import ConfigurationError, Error
from lg_core.sandbox import Sandbox
from lg_core.workspace import Workspace

OBSERVATION_SECONDS = 60.0
DEFAULT_PYTHON = "/usr/bin/python3"
DEFAULT_LIMITS: Mapping[str, int] = {
    "wall_seconds": 3600,
    "source_bytes": 100_000,
    "output_bytes": 200_000,
    "tool_calls": 200,
    "programs": 16,
    "concurrency": 4,
    "memory_bytes": 512 * 1024 * 1024,
    "cpu_seconds": 600,
    "file_bytes": 16 * 1024 * 1024,
    "cleanup_seconds": 5,
}


class SessionStateError(Error):
    """A control operation that the session's state does not allow (no active program, overlap)."""


def code_mode_limits(limits: Mapping[str, Any] | None) -> dict[str, int]:
    """``limits`` over DEFAULT_LIMITS; an unknown key or a value that is not a positive integer is refused."""
    merged = dict(DEFAULT_LIMITS)
    for key, value in dict(limits or {}).items():
        if key not in DEFAULT_LIMITS:
            raise ConfigurationError(f"unknown code-mode limit {key!r} (known: {', '.join(sorted(DEFAULT_LIMITS))})")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigurationError(f"code-mode limit {key!r} must be a positive integer, got {value!r}")
        merged[key] = value
    return merged


class Session:
    """See the module docstring."""

    def __init__(
        self,
        broker: Broker,
        sandbox_factory: Callable[[Workspace], Sandbox],
        limits: Mapping[str, Any] | None = None,
        observation_seconds: float = OBSERVATION_SECONDS,
        python: str = DEFAULT_PYTHON,
    ) -> None:
        self.broker = broker
        self.limits = code_mode_limits(limits)
        self._sandbox_factory = sandbox_factory
        self._observation_seconds = observation_seconds
        self._python = python
        self._operation = threading.Lock()
        self._program: Program | None = None
        self._programs = 0
        self._closed = False

    @property
    def active(self) -> bool:
        """Whether a program is running (its last observation was ``still_working``)."""
        return self._program is not None

    def execute(self, source: str, context: Any = None) -> ProgramResult:
        """Start a fresh program from ``source`` and return its first observation."""
        with self._exclusive():
            if self._program is not None:
                raise SessionStateError("a program is still running; wait for it or stop it before exec")
            if not isinstance(source, str) or not source.strip():
                return ProgramResult(status="error", error="exec needs the program's source code")
            if len(source.encode("utf-8")) > self.limits["source_bytes"]:
                return ProgramResult(
                    status="error", error=f"the program exceeds the source limit of {self.limits['source_bytes']} bytes"
                )
            if self._programs >= self.limits["programs"]:
                return ProgramResult(
                    status="error", error=f"this call reached its limit of {self.limits['programs']} programs"
                )
            self._programs += 1
            self.broker.reset_calls(self.limits["tool_calls"])
            self._program = Program(self.broker, self._sandbox_factory, self.limits, self._python, source)
            return self._observe(context)

    def wait(self, context: Any = None) -> ProgramResult:
        """Watch the active program for up to one more observation window."""
        with self._exclusive():
            if self._program is None:
                raise SessionStateError("no program is running: there is nothing to wait for")
            return self._observe(context)

    def stop(self, context: Any = None) -> ProgramResult:
        """End the active program; ``terminated`` with its last output."""
        with self._exclusive():
            program = self._program
            if program is None:
                raise SessionStateError("no program is running: there is nothing to stop")
            program.stop()
            return self._finished(program, *program.observe(0))

    def close(self) -> None:
        """End any active program and release what it holds; idempotent once it succeeded."""
        with self._operation:
            self._closed = True
            program, self._program = self._program, None
            if program is not None:
                program.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _observe(self, context: Any) -> ProgramResult:
        program = self._program
        assert program is not None
        try:
            output, final = program.observe(self._observation_seconds, context)
        except BaseException:
            self._program = None
            program.close()
            raise
        if final is None:
            return ProgramResult(output=output, status="still_working")
        return self._finished(program, output, final)

    def _finished(self, program: Program, output: str, final: tuple[str, Any, str | None] | None) -> ProgramResult:
        self._program = None
        program.close()
        status, value, error = final or ("terminated", None, None)
        return ProgramResult(output=output, value=value, status=status, error=error)  # type: ignore[arg-type]

    def _exclusive(self) -> Any:
        if self._closed:
            raise SessionStateError("this code-mode session is closed")
        if not self._operation.acquire(blocking=False):
            raise SessionStateError("another exec, wait or stop is in progress on this session")
        return _Release(self._operation)


class _Release:
    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


__all__ = ["DEFAULT_LIMITS", "OBSERVATION_SECONDS", "Session", "SessionStateError", "code_mode_limits"]
