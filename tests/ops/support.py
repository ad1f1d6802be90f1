"""Helpers for the operations tests: the ``lg`` command as a subprocess, a stack handle, process checks.

These tests start real processes (redis-server, PostgreSQL, Celery workers,
Flower, Chromium) exactly as a developer or an operator would.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DIST_APP_DIR = Path(__file__).parent.parent / "distributed"
LG = [str(Path(sys.executable).with_name("lg"))]


def wait_until(condition, timeout: float = 90, what: str = "condition"):
    """``condition()``'s first truthy value, polled every 0.2 s; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def lg_env(**extra: str) -> dict[str, str]:
    """This environment without LG_* settings (each test says what it wants), dist_app importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LG_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(DIST_APP_DIR), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def lg(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    return subprocess.run([*LG, *args], env=env or lg_env(), cwd=cwd, capture_output=True, text=True, timeout=timeout)


def live_pids() -> set[int]:
    """Every process that exists and is not a zombie (read from /proc, independently of lg_scheduler)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in ("Z", "X"):
                pids.add(int(entry.name))
    return pids


def descendants(root: int) -> set[int]:
    """``root`` and every live process below it (by parent pid)."""
    children: dict[int, list[int]] = {}
    for pid in live_pids():
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found & live_pids()


@dataclass
class Stack:
    """One `lg stack` directory driven through the CLI."""

    root: Path
    ports: dict[str, int]

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return lg("stack", *args, "--dir", str(self.root))

    def up(self, *extra: str) -> subprocess.CompletedProcess:
        ports = [f"--{name}-port={port}" for name, port in self.ports.items()]
        return self.run("up", *ports, "--concurrency", "1", *extra)

    def env(self) -> dict[str, str]:
        """The variables of the env file, as a shell that sources it would have them."""
        values = {}
        for line in (self.root / "env").read_text().splitlines():
            if line.startswith("export "):
                key, _, value = shlex.split(line[len("export ") :])[0].partition("=")
                values[key] = value
        return values

    def pids(self) -> dict[str, int]:
        return {p.stem: int(p.read_text().split()[0]) for p in (self.root / "pids").glob("*.pid")}
