"""start_execution while the broker is unreachable: the run is stored, returned, and delivered later.

The run and its first step are committed before the task is sent (the steps
table is the outbox), so a Redis outage at that moment must neither lose the
run nor make the caller believe it did not start (a retry would start a
second run). The scheduler's relay sends the step once Redis is back.
"""

from __future__ import annotations

import logging
import time

import pytest

import lg_core
from lg_core import Configuration, with_configuration
from lg_scheduler.scheduler import Scheduler
from tests.distributed import dist_app


class RedisOutage:
    """Kill the test's redis-server and bring it back on the same port (no data survives)."""

    def __init__(self, server) -> None:
        self.server = server

    def begin(self) -> None:
        self.server.process.kill()
        self.server.process.wait()

    def end(self) -> None:
        if not self.server.is_ready():
            self.server.start()


@pytest.fixture
def outage(dist):
    outage = RedisOutage(dist.redis)
    yield outage
    outage.end()


@pytest.mark.parametrize("pooled", [False, True], ids=["no-connection-yet", "pooled-connection-died"])
def test_a_run_started_while_redis_is_down_is_returned_and_runs_once_redis_is_back(dist, outage, caplog, pooled):
    config = Configuration(
        run_store=dist.pg_url, broker_url=dist.redis.url, imports=["dist_app"], lease_seconds=3, relay_grace=0.5
    )
    with with_configuration(config), caplog.at_level(logging.WARNING, logger="lg_workers.celery_backend"):
        if pooled:  # the client has published before: its pooled connection dies with the server
            config.runtime().backend.advance("no-such-run")
        outage.begin()
        execution = dist_app.StepAgent.start_execution("Record every step.")

        assert lg_core.get_run(execution.run_id).outcome is None  # stored, still to run
        assert f"run {execution.run_id} is stored but the broker is unreachable" in caplog.text

        outage.end()
        dist.start_workers()
        relayed = _relay_until_sent(Scheduler(config.runtime()))
        run = execution.wait(timeout=60)

    assert relayed >= 1, "the relay sent the stored first step"
    assert run.outcome == "completed", run.error
    assert sorted(n for _tool, n, _key in dist.calls()) == list(range(dist_app.TURNS)), "every call ran once"


def _relay_until_sent(scheduler: Scheduler, timeout: float = 60) -> int:
    """Run scheduler passes until the relay has sent something (the step waits out relay_grace first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        relayed = scheduler.run_once()["relayed"]
        if relayed:
            return relayed
        time.sleep(0.1)
    return 0
