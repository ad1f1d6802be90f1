"""``--profile``: sample the worker processes with py-spy while section 2 runs.

py-spy (``pip install py-spy``; it needs ptrace, i.e. root or CAP_SYS_PTRACE)
samples each worker and its pool children from outside, so Celery's own
consumer loop and task events are seen as well as the task body, which a
cProfile inside the task would miss. ``--gil`` keeps only samples of the thread
holding the GIL: time spent waiting on PostgreSQL or Redis sockets is not
counted, so the shares approximate where the workers' CPU goes.

Two views per worker: own time by library (the innermost frame's package) and
the LittleGhost functions with the most inclusive time.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

LIBRARIES = (
    "celery",
    "kombu",
    "billiard",
    "redis",
    "psycopg",
    "sqlalchemy",
    "pydantic",
    "jsonschema",
    "json",
    "lg_core/engine",
    "lg_core/store",
    "lg_core/providers",
    "lg_core",
    "lg_workers",
    "logging",
    "threading",
)


def py_spy() -> str | None:
    candidate = Path(sys.executable).with_name("py-spy")
    return str(candidate) if candidate.exists() else shutil.which("py-spy")


class PySpy:
    """One ``py-spy record`` per worker process between ``start()`` and ``stop()``."""

    def __init__(self, workers: dict[str, int], rate: int = 250) -> None:
        binary = py_spy()
        if binary is None:
            raise RuntimeError("--profile needs py-spy: .venv/bin/pip install py-spy")
        self.binary, self.workers, self.rate = binary, workers, rate
        self.folder = Path(tempfile.mkdtemp(prefix="lg-bench-spy-"))
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        for name, pid in self.workers.items():
            argv = [
                self.binary,
                "record",
                "--pid",
                str(pid),
                "--subprocesses",
                "--gil",
                "--rate",
                str(self.rate),
                "--format",
                "raw",
                "--full-filenames",
                "--nonblocking",
                "--output",
                str(self.folder / f"{pid}.txt"),
            ]
            self.processes[name] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> dict[str, dict[str, list[tuple[float, str]]]]:
        report = {}
        for name, process in self.processes.items():
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            report[name] = summarize(self.folder / f"{self.workers[name]}.txt")
        shutil.rmtree(self.folder, ignore_errors=True)
        return report


def summarize(path: Path, top: int = 15) -> dict[str, list[tuple[float, str]]]:
    """Own time by library and the top inclusive LittleGhost functions, as % of samples."""
    if not path.exists():
        return {"libraries": [], "functions": []}
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        own[_library(frames[-1])] += count
        for name in {_function(f) for f in frames if "lg_core" in f or "lg_workers" in f}:
            inclusive[name] += count
    if not total:
        return {"libraries": [], "functions": []}
    return {
        "libraries": [(100 * n / total, name) for name, n in own.most_common(top)],
        "functions": [(100 * n / total, name) for name, n in inclusive.most_common(top)],
    }


def _library(frame: str) -> str:
    location = frame[frame.rfind("(") + 1 :]
    for name in LIBRARIES:
        if f"/{name}/" in location or f"/{name}.py" in location:
            return name
    return "other (stdlib, C)"


def _function(frame: str) -> str:
    """``Engine.commit (lg_core/store/repository.py:120)`` -> ``Engine.commit (lg_core/store/repository.py)``."""
    head, _, location = frame.rpartition(" (")
    path = location.rstrip(")").rsplit(":", 1)[0]
    for root in ("lg_core/", "lg_workers/"):
        if root in path:
            path = path[path.index(root) :]
    return f"{head} ({path})"
