"""Fixtures for tests with real Redis, real PostgreSQL and real Celery worker processes.

def test_something(dist):           # a fresh database, the session's Redis, this process configured
    dist.start_workers()            # real `celery worker` processes for every queue
    execution = dist_app.StepAgent.start_execution("go")
    ...
    dist.kill_worker(...)           # SIGKILL, see WorkerProcess
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lg_core import Configuration, with_configuration
from lg_scheduler.stack.servers import RedisServer
from lg_workers.worker import plan

HERE = Path(__file__).parent
ALL_QUEUES = ("lg.orchestrate", "lg.model", "lg.tools")


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer().start()
    yield server
    server.stop()


class WorkerProcess:
    """One `celery worker` process (and its pool children, for prefork)."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.handle = log.open("w")
        self.process = subprocess.Popen(argv, env=env, stdout=self.handle, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout: float = 60) -> WorkerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            if "ready." in self.log.read_text():
                return self
            time.sleep(0.1)
        raise RuntimeError(f"worker not ready after {timeout} s:\n{self.log.read_text()[-3000:]}")

    def children(self) -> list[int]:
        """Pool child pids (prefork)."""
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        try:
            return [int(p) for p in path.read_text().split()]
        except OSError:
            return []

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for child in self.children():
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.handle.close()


class DistributedStack:
    """The distributed pieces for one test: env for child processes and worker control."""

    def __init__(self, tmp_path: Path, pg_url: str, redis: RedisServer) -> None:
        self.tmp_path = tmp_path
        self.pg_url = pg_url
        self.redis = redis
        self.log = tmp_path / "calls.log"
        self.ready_dir = tmp_path / "ready"
        self.ready_dir.mkdir()
        self.workers: list[WorkerProcess] = []
        self.lease_seconds = 3.0  # every process's lease (a chaos test may set another: chaos_env)
        self.config = Configuration(
            run_store=pg_url, broker_url=redis.url, imports=["dist_app"], lease_seconds=self.lease_seconds
        )

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            LG_RUN_STORE=self.pg_url,
            LG_BROKER_URL=self.redis.url,
            LG_IMPORTS="dist_app",
            LG_LEASE_SECONDS=str(self.lease_seconds),
            PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]),
            DIST_APP_LOG=str(self.log),
            DIST_APP_READY_DIR=str(self.ready_dir),
        )
        env.update(extra)
        return env

    def start_workers(
        self,
        queues=ALL_QUEUES,
        pool: str | None = None,
        concurrency: int | None = None,
        *,
        supervised: bool = False,
        **env: str,
    ) -> list[WorkerProcess]:
        """Celery workers for ``queues``: bare `celery worker` processes (their pids are what a
        test kills), or with ``supervised`` one `lg worker` per group, as deployed: it starts the
        Celery worker again when that exits on its own (e.g. Celery giving up after a broker restart)."""
        started = []
        for group in plan(queues, pool=pool, concurrency=concurrency):
            name = f"w{len(self.workers)}"
            argv = _supervised_argv(group) if supervised else group.argv(name, loglevel="INFO")
            worker = WorkerProcess(argv, self.env(**env), self.tmp_path / f"{name}.log")
            self.workers.append(worker)
            started.append(worker)
        for worker in started:
            worker.wait_ready()
        return started

    def wait_for_hang(self, name: str, timeout: float = 60) -> int:
        """Wait until a tool call set to hang (DIST_APP_HANG) is running; returns its pid."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = list(self.ready_dir.glob(f"{name}-*"))
            if found:
                return int(found[0].read_text())
            time.sleep(0.05)
        raise AssertionError(f"no process reached the hanging call {name} in {timeout} s")

    def calls(self) -> list[tuple[str, int, str]]:
        if not self.log.exists():
            return []
        rows = []
        for line in self.log.read_text().splitlines():
            tool, n, key = line.split()
            rows.append((tool, int(n), key))
        return rows

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.config.close()


def _supervised_argv(group) -> list[str]:
    argv = [sys.executable, "-m", "lg_core.cli", "worker", "--queues", ",".join(group.queues), "--pool", group.pool]
    return argv + ["--concurrency", str(group.concurrency)]


@pytest.fixture
def dist(tmp_path, pg_url, redis_server, monkeypatch):
    """A fresh database, the shared Redis (flushed), and this process configured as a client."""
    import redis

    redis.Redis.from_url(redis_server.url).flushall()
    monkeypatch.syspath_prepend(str(HERE))
    stack = DistributedStack(tmp_path, pg_url, redis_server)
    for key, value in stack.env().items():
        if key.startswith(("DIST_APP", "LG_")):
            monkeypatch.setenv(key, value)
    with with_configuration(stack.config):
        yield stack
    stack.stop()


@pytest.fixture
def ticking_scheduler(dist):
    """The scheduler's passes (its ``wake_timed_steps`` timer, ``end_runs``, the relay) every 0.2 s on a
    thread of this process, as a deployment runs them; yields the list of how many steps each pass woke."""
    from lg_scheduler.scheduler import Scheduler

    scheduler = Scheduler(dist.config.runtime())
    stop, woken = threading.Event(), []

    def tick() -> None:
        while not stop.is_set():
            woken.append(scheduler.run_once()["woken"])
            stop.wait(0.2)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    yield woken
    stop.set()
    ticker.join()


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/distributed" in str(item.fspath):
            item.add_marker(pytest.mark.distributed)
