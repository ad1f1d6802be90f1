"""ProcessSession: one owned child process with bounded I/O, limits and group cleanup.

The child starts in a new process group with an explicit environment (empty unless
the caller passes one or opts in to inheriting), so cleanup can signal the child and
its ordinary descendants together: terminate sends SIGTERM to the group, waits a
grace period, then SIGKILL. A descendant that leaves the group can outlive the
session on a backend without a PID namespace; the Bubblewrap backend's namespace
ends every descendant with the session.

CPU seconds and file size are kernel limits (RLIMIT_CPU, RLIMIT_FSIZE) applied by
``prlimit`` before the command starts, so they hold for every descendant. Memory is
sampled (see ``_memory_guard``). Output is captured up to ``output_bytes`` across
stdout and stderr together; the rest is dropped and reported as truncated.

Whoever opens a session owns it and must close it; ``close`` is safe to repeat.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lg_core.errors import CapabilityError, DependencyError, SandboxLimitError
from lg_core.sandbox._memory_guard import MemoryGuard, MemoryReader
from lg_core.sandbox._output_pump import OutputPump
from lg_core.sandbox.environment_policy import checked_variables

TERMINATE_GRACE_SECONDS = 1.0
_CHUNK = 65536
DEFAULT_OUTPUT_BYTES = 1_000_000


def prlimit_executable() -> str | None:
    """The ``prlimit`` program that applies kernel resource limits, when this host has one."""
    return shutil.which("prlimit", path="/usr/bin:/bin:/usr/sbin:/sbin")


def resource_limit_arguments(
    cpu_seconds: int | None = None, file_bytes: int | None = None, processes: int | None = None
) -> list[str]:
    """``prlimit`` arguments setting soft and hard limits for the command it runs (empty: none)."""
    options = [
        f"--{flag}={value}"
        for flag, value in (("cpu", cpu_seconds), ("fsize", file_bytes), ("nproc", processes))
        if value is not None
    ]
    if not options:
        return []
    executable = prlimit_executable()
    if executable is None:
        raise DependencyError("resource limits need the prlimit program (util-linux), which this host lacks")
    return [executable, *options, "--"]


class ProcessSession:
    """An owned, duplex child process in its own process group."""

    def __init__(
        self,
        command: Sequence[str],
        environment: Mapping[str, Any] | None = None,
        inherit_environment: bool = False,
        chdir: str | None = None,
        output_bytes: int = DEFAULT_OUTPUT_BYTES,
        memory_bytes: int | None = None,
        memory_reader: MemoryReader | None = None,
        cpu_seconds: int | None = None,
        file_bytes: int | None = None,
        user: int | None = None,
        group: int | None = None,
        per_stream_output: bool = False,
    ) -> None:
        argv = _checked_command(command)
        if isinstance(output_bytes, bool) or not isinstance(output_bytes, int) or output_bytes <= 0:
            raise ValueError(f"output_bytes must be a positive number of bytes, got {output_bytes!r}")
        if memory_bytes is not None and memory_reader is None and not sys.platform.startswith("linux"):
            raise CapabilityError("a memory limit is supervised through /proc, which only Linux provides")
        env = dict(os.environ) if inherit_environment else {}
        env.update(checked_variables(environment or {}, "child environment"))
        launcher = resource_limit_arguments(cpu_seconds=cpu_seconds, file_bytes=file_bytes)
        self._lock = threading.Lock()
        self._supervision_error: SandboxLimitError | None = None
        self._closed = False
        self._group_gone = False
        self._process = subprocess.Popen(
            [*launcher, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=chdir,
            process_group=0,
            user=user,
            group=group,
            extra_groups=[] if user is not None and os.geteuid() == 0 else None,
            close_fds=True,
        )
        self.pid = self._process.pid
        assert self._process.stdin is not None
        os.set_blocking(self._process.stdin.fileno(), False)
        assert self._process.stdout is not None and self._process.stderr is not None
        self._pump = OutputPump(
            {"stdout": self._process.stdout, "stderr": self._process.stderr}, output_bytes, per_stream_output
        )
        self._guard = (
            None
            if memory_bytes is None
            else MemoryGuard(
                self.pid,
                memory_bytes,
                self._violated,
                reader=memory_reader,
                still_running=lambda: self._process.poll() is None,
            )
        )

    # -- state -------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether the command or its original process group still runs; raises if supervision failed."""
        self._raise_supervision_error()
        return self._process.poll() is None or self._group_alive()

    @property
    def returncode(self) -> int | None:
        return self._process.poll()

    @property
    def output_truncated(self) -> bool:
        """Whether output past the capture limit was dropped."""
        return any(self._pump.truncated.values())

    @property
    def truncated(self) -> dict[str, bool]:
        return dict(self._pump.truncated)

    # -- I/O ---------------------------------------------------------------------------------

    def write(self, value: bytes | str, timeout: float | None = None) -> int:
        """Write ``value`` to the child's standard input; TimeoutError if it stops reading for ``timeout`` s.

        A child that never reads would otherwise block its parent forever once the
        pipe is full, so a caller that must stay responsive passes a timeout.
        """
        data = value.encode() if isinstance(value, str) else bytes(value)
        stdin = self._process.stdin
        if stdin is None or stdin.closed:
            raise BrokenPipeError("the child's standard input is closed")
        stdin.flush()
        fd = stdin.fileno()
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        written = 0
        while written < len(data):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"the child did not read its input within {timeout} seconds ({written} bytes sent)")
            _, writable, _ = select.select([], [fd], [], remaining)
            if writable:
                written += os.write(fd, data[written : written + _CHUNK])
        return written

    def close_write(self) -> None:
        """Close the child's standard input without ending the process."""
        if self._process.stdin is not None and not self._process.stdin.closed:
            try:
                self._process.stdin.close()
            except BrokenPipeError:
                pass

    def read(self, timeout: float = 0) -> bytes:
        """Standard output available now, waiting at most ``timeout`` seconds for some."""
        return self._pump.take("stdout", timeout)

    def read_stderr(self, timeout: float = 0) -> bytes:
        """Standard error available now, waiting at most ``timeout`` seconds for some."""
        return self._pump.take("stderr", timeout)

    def drain(self, timeout: float = 1.0) -> tuple[bytes, bytes]:
        """Everything still to come from both streams, waiting up to ``timeout`` for them to close."""
        self._pump.wait_closed(timeout)
        return self._pump.take("stdout"), self._pump.take("stderr")

    # -- lifecycle ---------------------------------------------------------------------------

    def wait(self, timeout: float | None = None, context: Any = None, terminate: bool = True) -> int:
        """Wait for the command to exit and return its exit status (negative: ended by that signal).

        Expiry raises TimeoutError, after stopping the whole process group when
        ``terminate`` is true. A cancelled or expired ``context`` (anything with a
        ``check()`` that raises) stops the group and re-raises. A supervised limit
        that ended the process raises SandboxLimitError.
        """
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            if context is not None:
                try:
                    context.check()
                except BaseException:
                    self.terminate()
                    raise
            remaining = None if deadline is None else deadline - time.monotonic()
            try:
                returncode = self._process.wait(timeout=0.05 if remaining is None else max(0.0, min(0.05, remaining)))
                break
            except subprocess.TimeoutExpired:
                if remaining is not None and remaining <= 0:
                    if terminate:
                        self.terminate()
                    raise TimeoutError(f"the sandboxed process did not finish within {timeout} seconds") from None
        self._raise_supervision_error()
        return returncode

    def terminate(self) -> int | None:
        """Stop the process group (SIGTERM, then SIGKILL after a grace period); the exit status."""
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + TERMINATE_GRACE_SECONDS
        while time.monotonic() < deadline and (self._process.poll() is None or self._group_alive()):
            time.sleep(0.02)
        if self._process.poll() is None or self._group_alive():
            self._signal_group(signal.SIGKILL)
        try:
            return self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """Terminate the process group when it still runs and release every pipe and thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._process.poll() is None or self._group_alive():
                self.terminate()
        finally:
            if self._guard is not None:
                self._guard.stop()
            self.close_write()
            self._pump.wait_closed(0.2)
            self._pump.stop()
            for stream in (self._process.stdout, self._process.stderr):
                if stream is not None:
                    stream.close()

    def __enter__(self) -> ProcessSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _violated(self, message: str, observed: int | None) -> None:
        limit = "memory_bytes" if observed is not None else "supervision"
        self._supervision_error = SandboxLimitError(message, limit=limit, observed=observed)
        self.terminate()

    def _raise_supervision_error(self) -> None:
        if self._supervision_error is not None:
            raise self._supervision_error

    def _group_alive(self) -> bool:
        """Whether a live (not zombie) process remains in the session's process group.

        Once the command is reaped and its group seen empty, the group is gone for good:
        its id may later name another process's group, which must never be signalled.
        """
        if self._group_gone:
            return False
        if sys.platform.startswith("linux"):
            alive = _live_group_member(self.pid)
        else:
            try:
                os.killpg(self.pid, 0)
                alive = True
            except ProcessLookupError:
                alive = False
            except PermissionError:
                alive = True
        if not alive and self._process.poll() is not None:
            self._group_gone = True
        return alive

    def _signal_group(self, signum: int) -> None:
        if self._group_gone:
            return
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _live_group_member(pgid: int) -> bool:
    """Whether ``/proc`` shows a process of group ``pgid`` that is not a zombie.

    A killed descendant whose parent died first stays a zombie until init reaps it,
    and a container's init may never do so; it holds no resources, so it does not
    count as the group still running.
    """
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _checked_command(command: Sequence[str]) -> list[str]:
    if isinstance(command, str | bytes) or not isinstance(command, Sequence) or not command:
        raise ValueError(f"a command must be a non-empty list of arguments, got {command!r}")
    for argument in command:
        if not isinstance(argument, str) or "\0" in argument:
            raise ValueError(f"command arguments must be strings without NUL bytes, got {argument!r}")
    return list(command)
