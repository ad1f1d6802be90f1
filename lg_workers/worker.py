"""``lg worker``: start Celery workers with the right pool for each queue.

One ``lg worker --queues lg.orchestrate,lg.model,lg.tools`` starts one Celery
worker per pool kind (DESIGN 4.4): the model queue gets a thread pool wide
enough for many streaming calls, orchestration and tools get prefork pools.
The command supervises them: a signal is forwarded to every worker and it
exits when they have all stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from lg_core.errors import ConfigurationError
from lg_workers.queues import POOLS, QUEUES


@dataclass(frozen=True)
class WorkerGroup:
    pool: str
    concurrency: int
    queues: tuple[str, ...]

    def argv(self, name: str, loglevel: str = "INFO") -> list[str]:
        return [
            sys.executable, "-m", "celery", "-A", "lg_workers.app", "worker",
            "-Q", ",".join(self.queues), "--pool", self.pool, "--concurrency", str(self.concurrency),
            "--hostname", f"{name}@%h", "--loglevel", loglevel, "--without-gossip", "--without-mingle",
            "-E",
        ]


def plan(queues: Sequence[str], pool: str | None = None, concurrency: int | None = None) -> list[WorkerGroup]:
    """Group ``queues`` by the pool they need (or all in ``pool`` when forced)."""
    unknown = [q for q in queues if q not in QUEUES]
    if unknown:
        raise ConfigurationError(f"unknown queue(s) {unknown}; LittleGhost queues are {', '.join(QUEUES)}")
    groups: dict[str, list[str]] = {}
    for queue in queues:
        groups.setdefault(pool or POOLS[queue][0], []).append(queue)
    return [
        WorkerGroup(kind, concurrency or max(POOLS[q][1] for q in members), tuple(members))
        for kind, members in groups.items()
    ]


def run_workers(groups: Sequence[WorkerGroup], env: dict[str, str] | None = None, loglevel: str = "INFO") -> int:
    """Start every group and wait; returns the first non-zero exit code (0 if all clean)."""
    children = [
        subprocess.Popen(group.argv(f"lg-{group.pool}-{os.getpid()}", loglevel), env=env or os.environ.copy())
        for group in groups
    ]

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(signum, forward)
    codes = [child.wait() for child in children]
    return next((code for code in codes if code), 0)


__all__ = ["WorkerGroup", "plan", "run_workers"]
