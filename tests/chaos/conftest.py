"""Fixtures for the chaos tests: the distributed stack of tests/distributed plus a scheduler.

    @pytest.mark.chaos
    def test_something(dist, scheduler):      # workers are started by the test; the scheduler runs
        ...                                   # Scheduler.run_forever every 0.2 s in its own process

The relay grace is lowered (``relay_grace`` fixture, 2 s; a test may override it
by parametrizing ``relay_grace``) in this process and in every child process,
so recovery happens within seconds. Parametrize ``scheduler`` indirectly with
extra command-line arguments (e.g. ``["--no-local-liveness"]``) to change it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from lg_scheduler.stack.servers import stop_gracefully
from tests.distributed.conftest import HERE as DISTRIBUTED
from tests.distributed.conftest import dist, redis_server  # noqa: F401 - the same fixtures, re-exported

HERE = Path(__file__).parent
# The chaos tests use the distributed tests' application module (every worker imports it).
if str(DISTRIBUTED) not in sys.path:
    sys.path.insert(0, str(DISTRIBUTED))
SCHEDULER_INTERVAL = 0.2


@pytest.fixture
def relay_grace() -> float:
    return 2.0


@pytest.fixture
def lease_seconds() -> float:
    return 3.0


@pytest.fixture
def chaos_env(dist, relay_grace, lease_seconds, monkeypatch):  # noqa: F811 - dist is the imported fixture
    """The dist stack with the lowered relay grace and its lease (a test may parametrize either), here
    and in every process started later."""
    monkeypatch.setenv("LG_RELAY_GRACE", str(relay_grace))
    dist.config.relay_grace = relay_grace
    monkeypatch.setenv("LG_LEASE_SECONDS", str(lease_seconds))
    dist.lease_seconds = dist.config.lease_seconds = lease_seconds
    return dist


class SchedulerProcess:
    """``tests/chaos/run_scheduler.py`` as a child process, with its log."""

    def __init__(self, env: dict[str, str], log: Path, args: list[str]) -> None:
        self.log = log
        self._handle = log.open("w")
        argv = [
            sys.executable,
            str(HERE / "run_scheduler.py"),
            "--interval",
            str(SCHEDULER_INTERVAL),
            *args,
        ]
        self.process = subprocess.Popen(argv, env=env, stdout=self._handle, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while "scheduler ready" not in log.read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the scheduler did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)

    def text(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        stop_gracefully(self.process, timeout=15)
        self._handle.close()


@pytest.fixture
def scheduler(chaos_env, request):
    process = SchedulerProcess(
        chaos_env.env(), chaos_env.tmp_path / "scheduler.log", list(getattr(request, "param", []))
    )
    yield process
    process.stop()


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/chaos" in str(item.fspath):
            item.add_marker(pytest.mark.distributed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed chaos test carries the tails of its workers' and scheduler's logs, for CI."""
    outcome = yield
    report = outcome.get_result()
    stack = item.funcargs.get("dist") if hasattr(item, "funcargs") else None
    if report.when != "call" or not report.failed or stack is None:
        return
    for log in sorted(stack.tmp_path.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-60:]
        report.sections.append((f"log tail: {log.name}", "\n".join(lines)))
