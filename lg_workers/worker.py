"""``lg worker``: start Celery workers with the right pool for each queue.

One ``lg worker --queues lg.orchestrate,lg.model,lg.tools`` starts one Celery
worker per pool kind: the three default queues share one thread pool wide
enough for many streaming calls (so a step's successor can run in the same
task, lg_workers.continuation), and lg.sandbox runs threads too (a
code-mode program stays with the process that started it:
lg_workers._program_home); a queue forced onto ``--pool prefork`` gets a
worker of its own.

The command checks its settings with all of lg_core and the application's
modules loaded, forks each Celery worker from that state (:func:`fork_worker`:
a fresh interpreter would import all of it again before taking its first
task), then replaces itself (:func:`supervise`, an ``exec``: same pid, so
signals and process managers see no change) with :mod:`lg_workers._supervisor`,
a process that imports next to nothing and holds a few MiB while it waits on
the workers: a signal is forwarded to every worker and it exits when they have
all stopped. A worker the supervisor starts again after a crash is a fresh
``python -m celery`` process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn, Protocol

from lg_core.errors import ConfigurationError
from lg_workers.queues import POOLS, QUEUES

# The signals that ask ``lg worker`` to stop; the supervisor forwards them to every worker.
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT}


@dataclass(frozen=True)
class WorkerGroup:
    pool: str
    concurrency: int
    queues: tuple[str, ...]

    def argv(self, name: str, loglevel: str = "INFO") -> list[str]:
        return [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "lg_workers",
            "worker",
            "-Q",
            ",".join(self.queues),
            "--pool",
            self.pool,
            "--concurrency",
            str(self.concurrency),
            "--hostname",
            f"{name}@%h",
            "--loglevel",
            loglevel,
            "--without-gossip",
            "--without-mingle",
            "-E",
        ]

    def spec(self) -> str:
        """The group as one command-line word, ``POOL:CONCURRENCY:QUEUE,QUEUE`` (:meth:`from_spec`)."""
        return f"{self.pool}:{self.concurrency}:{','.join(self.queues)}"

    @classmethod
    def from_spec(cls, spec: str) -> WorkerGroup:
        pool, concurrency, queues = spec.split(":", 2)
        return cls(pool, int(concurrency), tuple(queues.split(",")))


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


class Child(Protocol):
    """What the supervisor needs of a worker process: :class:`subprocess.Popen`'s interface."""

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def send_signal(self, signum: int) -> None: ...


class Inherited:
    """A worker forked by the command this process was before its ``exec``: still this process's
    child, so it is polled and reaped by pid, as Popen does for the ones started here."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _pid, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)


def worker_names(groups: Sequence[WorkerGroup]) -> list[str]:
    """Each group's Celery worker name: the queues it serves, ``lg-model+tools`` (``@host`` follows).

    Flower and ``celery inspect`` list workers by name, so the name says what a
    worker runs. Two workers of one host serving the same queues share a name,
    as two ``celery worker`` with the default ``celery@host`` do: monitoring
    then shows them as one.
    """
    return ["lg-" + "+".join(queue.removeprefix("lg.") for queue in group.queues) for group in groups]


def run_workers(
    groups: Sequence[WorkerGroup],
    env: dict[str, str] | None = None,
    loglevel: str = "INFO",
    restart: bool = True,
    started: Sequence[Child | None] | None = None,
) -> int:
    """Start every group and supervise them until a signal asks them to stop.

    ``started`` holds, per group, a worker already running (forked by the
    command) or None to start one here. A Celery worker that dies on its own (a
    crash, or Celery giving up after the broker restarted) is started again
    after a short pause when ``restart`` is true, so a Redis restart delays runs
    instead of stopping the fleet. Returns 0 after a clean shutdown, else the
    first non-zero exit code.
    """
    environment = env or os.environ.copy()
    names = worker_names(groups)
    children: list[Child] = []
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, forward)
    # ``supervise`` blocks the stop signals across its exec: one sent while this interpreter
    # started was held until now, and is handled here instead of killing the supervisor.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    for group, name, child in zip(groups, names, started or [None] * len(groups), strict=True):
        children.append(child or subprocess.Popen(group.argv(name, loglevel), env=environment))
    if stopping:  # asked to stop while the workers were being started: they are told too
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
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
    return (
        0
        if stopping and all(code in (0, -signal.SIGTERM, -signal.SIGINT) for code in codes)
        else (first_failure or next((code for code in codes if code), 0))
    )


def fork_worker(group: WorkerGroup, name: str, env: dict[str, str], loglevel: str = "INFO") -> int:
    """Fork a Celery worker for ``group`` from this process; returns its pid.

    The child runs the worker ``group.argv`` describes, in ``env``, but starts
    with everything this process imported (lg_core, the store, the
    application's modules, Celery's worker), so it is ready and takes its first
    task without importing them again. Call it with no other thread running and
    no connection open: the child gets a copy of this process, not a new one.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.environ.clear()
        os.environ.update(env)
        code = run_celery_worker(group, name, loglevel)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_celery_worker(group: WorkerGroup, name: str, loglevel: str = "INFO") -> int:
    """Run, in this process, the Celery worker that ``celery`` started with ``group.argv`` runs.

    It builds the worker as the ``celery worker`` command does (``app.Worker``
    with the same options) without loading that command line, whose plug-ins
    and interactive shell cost more to import than the worker itself.
    Returns the worker's exit code.
    """
    from celery.utils.log import mlevel
    from celery.utils.nodenames import default_nodename, host_format

    from lg_workers.celery import app

    worker = app.Worker(
        hostname=host_format(default_nodename(f"{name}@%h")),
        pool_cls=group.pool,
        concurrency=group.concurrency,
        queues=list(group.queues),
        loglevel=mlevel(loglevel),
        without_gossip=True,
        without_mingle=True,
        task_events=True,
    )
    worker.start()
    return int(worker.exitcode or 0)


def supervise(
    groups: Sequence[WorkerGroup], env: dict[str, str], loglevel: str = "INFO", *, fork: bool = True
) -> NoReturn:
    """Start the workers (forked from this process when ``fork``), then become their supervisor
    (:func:`run_workers` in a fresh, small interpreter).

    ``exec`` keeps this process's pid, stdin, stdout, stderr and children, and
    drops its memory: everything the command loaded to check its settings (the
    store, the engine, the user's modules) would otherwise stay resident, idle,
    for as long as the workers run.
    """
    names = worker_names(groups)
    specs = [group.spec() for group in groups]
    if fork and threading.active_count() == 1:  # a thread still running would be half-copied into the child
        specs = [
            f"{spec}@{fork_worker(group, name, env, loglevel)}"
            for spec, group, name in zip(specs, groups, names, strict=True)
        ]
    sys.stdout.flush()
    sys.stderr.flush()
    # The new interpreter has the default handlers (a stop signal would kill it, leaving the workers
    # running) until run_workers installs its own; a signal mask survives exec, so block them till then.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    os.execve(sys.executable, [sys.executable, "-m", "lg_workers._supervisor", loglevel, *specs], env)


__all__ = [
    "Child",
    "Inherited",
    "WorkerGroup",
    "fork_worker",
    "plan",
    "run_celery_worker",
    "run_workers",
    "supervise",
    "worker_names",
]
