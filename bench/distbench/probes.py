"""What the benchmark reads from the machine and the store: CPU time, RSS, step timestamps.

CPU time and memory come from /proc (Linux only, like the rest of the
benchmark); timestamps come from the run store's own columns (``lg_runs``,
``lg_steps``), read with SQLAlchemy Core against the schema module, so the
figures are what the durable engine recorded, not what the benchmark guessed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import and_, create_engine, func, or_, select
from sqlalchemy.engine import Engine

from lg_core.store.schema import runs, steps

TICKS = os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (a prefork worker's pool children, PostgreSQL's backends)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found += process_tree(child)
    return found


def cpu_seconds(pids: Iterable[int], *, reaped_children: bool = False) -> float:
    """User + system CPU time of ``pids`` (a process that is gone counts 0).

    With ``reaped_children``, also the time of their children that have exited
    and been waited for (``cutime`` + ``cstime``): summed over a whole live tree,
    that counts every process of the tree once, live or gone, so a PostgreSQL
    backend whose connection closed during a measurement keeps its time.
    """
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
        if reaped_children:
            total += int(fields[13]) + int(fields[14])
    return total / TICKS


class CpuMeter:
    """CPU seconds used by named process trees between ``start()`` and ``stop()``.

    Trees are re-read at both ends, so PostgreSQL backends and pool children
    that appear meanwhile count, and a tree's figure includes its members'
    reaped children, so one that exits in between keeps its time (a backend
    that closed would otherwise take its CPU with it: with a worker that opens
    and closes connections, the PostgreSQL CPU would read 0.6-0.9 ms per run
    instead of about 6).
    """

    def __init__(self, groups: dict[str, int | tuple[int, ...]]) -> None:
        self.groups = groups  # name -> root pid of a tree, or a tuple of exact pids (no children)
        self._before: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def _sample(self) -> dict[str, float]:
        return {
            name: cpu_seconds(pids)
            if isinstance(pids, tuple)
            else cpu_seconds(process_tree(pids), reaped_children=True)
            for name, pids in self.groups.items()
        }

    def start(self) -> CpuMeter:
        self._before = self._sample()
        return self

    def stop(self) -> dict[str, float]:
        after = self._sample()
        self.used = {name: max(0.0, after[name] - self._before.get(name, 0.0)) for name in after}
        return self.used


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from /proc/stat, for a utilisation ratio."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return float(sum(fields) - idle), float(sum(fields))


def rss_bytes(pids: Iterable[int]) -> int:
    """Sum of VmRSS over ``pids`` (from /proc; a process that is gone counts 0)."""
    total = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
                break
    return total


@dataclass(frozen=True)
class StepTimes:
    key: str
    kind: str
    status: str
    created_at: float
    started_at: float | None
    finished_at: float | None


@dataclass(frozen=True)
class RunTimes:
    id: str
    status: str
    created_at: float
    finished_at: float | None


class StoreProbe:
    """Read-only queries over the run store's tables (a connection of its own)."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = create_engine(url, pool_size=2)

    def close(self) -> None:
        self.engine.dispose()

    def finished_since(self, since: float) -> int:
        """Runs created at or after ``since`` that have finished."""
        query = (
            select(func.count())
            .select_from(runs)
            .where(and_(runs.c.created_at >= since, runs.c.finished_at.isnot(None)))
        )
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def wait_finished(self, since: float, count: int, timeout: float, poll: float = 0.25) -> int:
        """Block until ``count`` runs created since ``since`` have finished; returns how many did."""
        deadline = time.monotonic() + timeout
        done = self.finished_since(since)
        while done < count and time.monotonic() < deadline:
            time.sleep(poll)
            done = self.finished_since(since)
        return done

    def runs_since(self, since: float) -> list[RunTimes]:
        query = select(runs.c.id, runs.c.status, runs.c.created_at, runs.c.finished_at).where(
            runs.c.created_at >= since
        )
        with self.engine.connect() as conn:
            return [RunTimes(*row) for row in conn.execute(query)]

    def steps_of(self, run_ids: Sequence[str]) -> dict[str, list[StepTimes]]:
        """Each run's model and tool steps (the ``root/start`` row is not a step of work)."""
        found: dict[str, list[StepTimes]] = {run_id: [] for run_id in run_ids}
        columns = (
            steps.c.run_id,
            steps.c.key,
            steps.c.kind,
            steps.c.status,
            steps.c.created_at,
            steps.c.started_at,
            steps.c.finished_at,
        )
        ids = list(run_ids)
        with self.engine.connect() as conn:
            for start in range(0, len(ids), 50):
                chunk = ids[start : start + 50]
                query = select(*columns).where(
                    and_(
                        or_(*[steps.c.run_id == run_id for run_id in chunk]),
                        or_(steps.c.kind == "model", steps.c.kind == "tool"),
                    )
                )
                for run_id, *rest in conn.execute(query):
                    found[run_id].append(StepTimes(*rest))
        return found

    def server_settings(self) -> dict[str, str]:
        names = (
            "server_version",
            "fsync",
            "synchronous_commit",
            "wal_sync_method",
            "shared_buffers",
        )
        with self.engine.connect() as conn:
            return {name: str(conn.exec_driver_sql(f"SHOW {name}").scalar_one()) for name in names}
