"""``lg worker``: start Celery workers with the right pool for each queue.

One ``lg worker --queues lg.orchestrate,lg.model,lg.tools`` starts one Celery
worker per pool kind: the model and tools queues share a thread
pool wide enough for many streaming calls (so a step's successor can run in
the same task, lg_workers.continuation), orchestration gets a prefork pool.
The command supervises them: a signal is forwarded to every worker and it
exits when they have all stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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


def run_workers(
    groups: Sequence[WorkerGroup], env: dict[str, str] | None = None, loglevel: str = "INFO", restart: bool = True
) -> int:
    """Start every group and supervise them until a signal asks them to stop.

    A Celery worker that dies on its own (a crash, or Celery giving up after the
    broker restarted) is started again after a short pause when ``restart`` is
    true, so a Redis restart delays runs instead of stopping the fleet. Returns
    0 after a clean shutdown, else the first non-zero exit code.
    """
    environment = env or os.environ.copy()
    names = [f"lg-{group.pool}-{os.getpid()}" for group in groups]
    children = [subprocess.Popen(group.argv(name, loglevel), env=environment) for group, name in zip(groups, names, strict=True)]
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(signum, forward)
    first_failure = 0
    while any(child.poll() is None for child in children) or (restart and not stopping):
        for index, child in enumerate(children):
            code = child.poll()
            if code is None or stopping or not restart:
                continue
            first_failure = first_failure or code
            print(f"lg worker: {names[index]} exited with {code}; starting it again", file=sys.stderr, flush=True)
            time.sleep(1.0)
            children[index] = subprocess.Popen(groups[index].argv(names[index], loglevel), env=environment)
        time.sleep(0.2)
    codes = [child.wait() for child in children]
    return 0 if stopping and all(code in (0, -signal.SIGTERM, -signal.SIGINT) for code in codes) else (
        first_failure or next((code for code in codes if code), 0)
    )


__all__ = ["WorkerGroup", "plan", "run_workers"]
