"""Detached processes with pid files: start, check, stop (``lg stack``).

The local stack's processes must outlive the ``lg stack up`` command that
started them, so each one is started in a session (and process group) of its
own and remembered by a pid file holding ``<pid> <start time>``: the start
time tells a live process from an unrelated one that reused its pid. Stopping
signals the process, waits for its whole group (Celery pool children,
PostgreSQL backends) to go, then SIGKILLs whatever is left; a group whose
leader died but whose children live on (a SIGKILLed ``lg worker``) is still
found and stopped through its group id.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psutil

from lg_core.lease_holders import process_start_time

STOP_TIMEOUT = 20.0


@dataclass(frozen=True)
class ProcessSpec:
    """What to run for one named stack process, and how to stop it."""

    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    cwd: Path | None = None
    stop_signal: int = signal.SIGTERM
    # The pid that receives stop_signal when it is not the leader (PostgreSQL under runuser).
    signal_pid: Callable[[], int | None] | None = None


@dataclass
class ProcessState:
    """One stack process as seen now: its leader pid (if it ran) and which group members are alive."""

    name: str
    pid: int | None
    alive: bool
    members: list[int] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.alive:
            return "alive"
        if self.members:
            return f"dead ({len(self.members)} orphaned process(es) left)"
        return "dead" if self.pid else "stopped"


class ProcessTable:
    """Pid files in ``root/pids`` and logs in ``root/logs`` for the processes started there."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.pids = self.root / "pids"
        self.logs = self.root / "logs"

    def log_file(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def pid_file(self, name: str) -> Path:
        return self.pids / f"{name}.pid"

    def state(self, name: str) -> ProcessState:
        recorded = self._read_pid(name)
        if recorded is None:
            return ProcessState(name, None, False)
        pid, start = recorded
        alive = process_start_time(pid) == start
        return ProcessState(name, pid, alive, group_members(pid))

    def start(self, spec: ProcessSpec) -> tuple[int, int]:
        """Start ``spec`` detached; returns its pid and the log offset its output starts at."""
        self.pids.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.log_file(spec.name)
        with log.open("a") as handle:
            handle.write(f"\n=== lg stack: {spec.name} starting at {datetime.now().isoformat(timespec='seconds')}\n")
            handle.flush()
            offset = handle.tell()
            process = subprocess.Popen(
                spec.argv,
                env=spec.env,
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        start = process_start_time(process.pid) or "0"
        pid_file = self.pid_file(spec.name)
        draft = pid_file.with_name(f".{pid_file.name}")
        draft.write_text(f"{process.pid} {start}\n")
        draft.replace(pid_file)  # `lg stack status` in another process never reads it half written
        return process.pid, offset

    def stop(self, spec: ProcessSpec, timeout: float = STOP_TIMEOUT) -> bool:
        """Stop ``spec``'s process group gracefully, then by SIGKILL; True if anything was running."""
        state = self.state(spec.name)
        if state.pid is None or not state.members:
            self.pid_file(spec.name).unlink(missing_ok=True)
            return False
        target = (spec.signal_pid() if spec.signal_pid else None) or (state.pid if state.alive else None)
        if target is not None:
            _signal(target, spec.stop_signal)
        else:
            _signal_group(state.pid, signal.SIGTERM)  # leader gone: ask the orphans directly
        if not _wait_gone(state.pid, timeout):
            _signal_group(state.pid, signal.SIGKILL)
            _wait_gone(state.pid, 10.0)
        self.pid_file(spec.name).unlink(missing_ok=True)
        return True

    def _read_pid(self, name: str) -> tuple[int, str] | None:
        try:
            pid_text, _, start = self.pid_file(name).read_text().strip().partition(" ")
            return int(pid_text), start
        except (OSError, ValueError):
            return None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of session ``pgid`` and their descendants.

    Descendants count too because some children start sessions of their own
    (PostgreSQL's auxiliary processes and backends call setsid).
    """
    parents: dict[int, int] = {}
    members: set[int] = set()
    for process in psutil.process_iter(["ppid", "status"]):
        if process.info["status"] in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) or process.info["ppid"] is None:
            continue
        parents[process.pid] = process.info["ppid"]
        if _group_and_session(process.pid) == (pgid, pgid):
            members.add(process.pid)
    grew = True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in members and pid not in members}
        members |= found
        grew = bool(found)
    return sorted(members)


def _group_and_session(pid: int) -> tuple[int, int] | None:
    """``pid``'s process group and session; the group stands for both where the session is not shown to us."""
    try:
        group = os.getpgid(pid)
    except OSError:
        return None
    try:
        return group, os.getsid(pid)
    except PermissionError:  # macOS may refuse getsid for a process of another session
        return group, group
    except OSError:
        return None


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _wait_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return True
        time.sleep(0.1)
    return not group_members(pgid)


__all__ = ["STOP_TIMEOUT", "ProcessSpec", "ProcessState", "ProcessTable", "group_members"]
