"""The processes of one benchmark run: PostgreSQL (fsync on), Redis, Celery workers, a scheduler.

Workers get the pools and options ``lg worker`` gives them (``lg_workers.worker.plan``
and ``WorkerGroup.argv``, a fresh ``python -m celery`` process each, as ``lg worker``'s
supervisor restarts one), with the settings in their environment; the floor's
worker is a plain ``celery worker`` of the bench-only app. Everything lives in
one temporary directory that :meth:`BenchStack.close` removes.
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lg_core import Configuration
from lg_scheduler.stack.servers import PostgresServer, RedisServer, stop_gracefully
from lg_workers.worker import WorkerGroup, plan

BENCH_DIR = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


class Worker:
    """One ``celery worker`` process and its log; ``pids()`` adds its pool children (prefork)."""

    def __init__(
        self,
        name: str,
        group: WorkerGroup | None,
        argv: list[str],
        env: dict[str, str],
        log: Path,
        pool: tuple[str, int] | None = None,
    ) -> None:
        self.name, self.group, self.log = name, group, log
        self.pool = pool or ((group.pool, group.concurrency) if group else ("", 0))  # (kind, concurrency)
        self._handle = log.open("w")
        self.process = subprocess.Popen(argv, env=env, stdout=self._handle, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout: float = 90) -> Worker:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited with {self.process.returncode}:\n{self.tail()}")
            if " ready." in self.log.read_text(errors="replace"):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"worker {self.name} not ready after {timeout} s:\n{self.tail()}")

    def children(self) -> list[int]:
        return _children(self.pid)

    def pids(self) -> list[int]:
        return [self.pid, *self.children()]

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def kill_whole(self) -> None:
        """SIGKILL the worker and every process under it at once, as when its host or container dies."""
        descendants = _descendants(self.pid)
        _kill(self.pid)
        for pid in descendants:
            _kill(pid)
        self.process.wait()

    def stop(self) -> None:
        children = self.children()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pid in children:
            _kill(pid)
        self._handle.close()


class Scheduler:
    """``lg scheduler`` (same-host liveness) or distbench/run_scheduler.py --no-local-liveness."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, ready: str) -> None:
        self.log = log
        self._handle = log.open("w")
        self.process = subprocess.Popen(argv, env=env, stdout=self._handle, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while ready not in log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the scheduler did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.05)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        stop_gracefully(self.process)
        self._handle.close()


class BenchStack:
    """PostgreSQL with fsync on, Redis, and the workers and schedulers started on them."""

    def __init__(self, *, lease_seconds: float, loglevel: str = "INFO") -> None:
        self.root = Path(tempfile.mkdtemp(prefix="lg-bench-dist-"))
        self.lease_seconds = lease_seconds
        self.loglevel = loglevel
        self.postgres = PostgresServer(fsync=True)  # its own directory, owned by the postgres user when root
        self.redis = RedisServer(root=self.root / "redis")
        self.workers: list[Worker] = []
        self.schedulers: list[Scheduler] = []
        self.store_url = ""
        self.hang_dir = self.root / "hang"
        self.hang_dir.mkdir()

    def start(self) -> BenchStack:
        self.postgres.start()
        self.redis.start()
        self.store_url = self.postgres.create_database("lg_bench")
        return self

    def configuration(self) -> Configuration:
        return Configuration(
            run_store=self.store_url,
            broker_url=self.redis.url,
            imports=["distbench.app"],
            lease_seconds=self.lease_seconds,
        )

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LG_", "BENCH_"))}
        env.update(
            LG_RUN_STORE=self.store_url,
            LG_BROKER_URL=self.redis.url,
            LG_IMPORTS="distbench.app",
            LG_LEASE_SECONDS=str(self.lease_seconds),
            PYTHONPATH=os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p),
        )
        env.update(extra)
        return env

    # -- workers ----------------------------------------------------------------------

    def start_workers(
        self,
        queues: tuple[str, ...],
        *,
        pool: str | None = None,
        concurrency: int | None = None,
        env: dict[str, str] | None = None,
    ) -> list[Worker]:
        """One Celery worker per pool kind for ``queues``, as ``lg worker -Q ... [--pool] [-c]`` starts them."""
        started = []
        for group in plan(queues, pool=pool, concurrency=concurrency):
            name = f"w{len(self.workers)}-{group.pool}"
            worker = Worker(
                name,
                group,
                group.argv(name, self.loglevel),
                self.env(**(env or {})),
                self.root / f"{name}.log",
            )
            self.workers.append(worker)
            started.append(worker)
        for worker in started:
            worker.wait_ready()
        return started

    def start_floor_worker(
        self, pool: str, concurrency: int, *, app: str = "distbench.floor_app", wait: bool = True
    ) -> Worker:
        """A plain ``celery worker`` of a bench-only app (``app``: a distbench module with ``QUEUE``);
        ``wait``: return once it is ready (else at once, for the caller to time its start)."""
        queue = importlib.import_module(app).QUEUE
        name = f"w{len(self.workers)}-{app.rsplit('_', 1)[0].rsplit('.', 1)[-1]}"
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            "-Q",
            queue,
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--hostname",
            f"{name}@%h",
            "--loglevel",
            self.loglevel,
            "--without-gossip",
            "--without-mingle",
            "-E",
        ]
        worker = Worker(name, None, argv, self.env(), self.root / f"{name}.log", pool=(pool, concurrency))
        self.workers.append(worker)
        return worker.wait_ready() if wait else worker

    def start_lg_worker(self, *args: str, env: dict[str, str] | None = None) -> Worker:
        """The ``lg worker`` command itself (``args``: its options), returned at once: the process is
        the command, which starts one Celery worker per pool kind under it (``Worker.pids`` lists
        only its direct children; ``probes.process_tree`` lists every process)."""
        name = f"w{len(self.workers)}-lg"
        argv = [sys.executable, "-m", "lg_core.cli", "worker", "--loglevel", self.loglevel, *args]
        worker = Worker(name, None, argv, self.env(**(env or {})), self.root / f"{name}.log", pool=("lg worker", 0))
        self.workers.append(worker)
        return worker

    def stop_workers(self, workers: list[Worker] | None = None) -> None:
        for worker in list(self.workers if workers is None else workers):
            worker.stop()
            self.workers.remove(worker)

    # -- schedulers ---------------------------------------------------------------------

    def start_scheduler(self, *, local_liveness: bool, interval: float = 1.0) -> Scheduler:
        """``lg scheduler`` itself, or (cross-host simulation) Scheduler(local_liveness=False)."""
        name = f"scheduler-{len(self.schedulers)}"
        if local_liveness:
            argv = [sys.executable, "-m", "lg_core.cli", "scheduler", "--interval", str(interval)]
            ready = "scheduler: a recovery pass"
        else:
            argv = [
                sys.executable,
                str(HERE / "run_scheduler.py"),
                "--interval",
                str(interval),
                "--no-local-liveness",
            ]
            ready = "scheduler ready"
        scheduler = Scheduler(argv, self.env(), self.root / f"{name}.log", ready)
        self.schedulers.append(scheduler)
        return scheduler

    def stop_scheduler(self, scheduler: Scheduler) -> None:
        scheduler.stop()
        self.schedulers.remove(scheduler)

    # -- teardown -----------------------------------------------------------------------

    def close(self) -> None:
        for scheduler in list(self.schedulers):
            self.stop_scheduler(scheduler)
        self.stop_workers()
        self.redis.stop()
        self.postgres.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _descendants(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        found += [child, *_descendants(child)]
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
