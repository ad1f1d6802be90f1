"""Workers and a scheduler whose clocks are five minutes off, around one PostgreSQL: leases are the server's call.

Each process's time.time is shifted (a worker's by $DIST_APP_CLOCK_SKEW, the
scheduler's by --clock-skew) and the scheduler judges holders by their leases
alone (--no-local-liveness), as it would on another host. GateAgent's first
tool call waits at a gate the test holds, so a step is known to be running on
the chosen worker while the others look at its lease.
"""

from __future__ import annotations

import time

import dist_app
import pytest
from chaos_checks import kill_whole

pytestmark = pytest.mark.chaos

BEHIND, AHEAD = "-300", "300"
LEASE = 3.0  # LG_LEASE_SECONDS of the distributed stack


def _gate_calls(dist) -> list[int]:
    return [n for tool, n, _key in dist.calls() if tool == "gate"]


def _tool_attempts(dist, run_id: str) -> list[int]:
    store = dist.config.runtime().store
    return [step.attempts for step in store.load_steps(run_id) if step.kind == "tool"]


@pytest.mark.parametrize("scheduler", [["--no-local-liveness", "--clock-skew", AHEAD]], indirect=True)
def test_a_step_running_on_a_worker_behind_is_left_to_it_by_a_scheduler_and_a_worker_ahead(dist, scheduler):
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=4)
    (dist.ready_dir / "hold-0").touch()
    dist.start_workers(queues=("lg.tools",), concurrency=1, DIST_APP_CLOCK_SKEW=BEHIND)
    execution = dist_app.GateAgent.start_execution("Pass the gates.")
    dist.wait_for_hang("gate-0")  # running on the worker behind
    # A worker ahead, which would claim the step if its lease looked expired (by its clock it
    # ended ten minutes ago), while the holder renews it for a couple of leases.
    dist.start_workers(queues=("lg.tools",), concurrency=1, DIST_APP_CLOCK_SKEW=AHEAD)
    time.sleep(2 * LEASE)
    (dist.ready_dir / "hold-0").unlink()

    assert execution.wait(timeout=60).outcome == "completed"
    assert _gate_calls(dist) == [0, 1, 2]  # each gate passed once: no step was taken from its holder
    assert _tool_attempts(dist, execution.run_id) == [1, 1, 1]
    assert "re-dispatched" not in scheduler.text()


@pytest.mark.parametrize("scheduler", [["--no-local-liveness", "--clock-skew", BEHIND]], indirect=True)
def test_a_step_of_a_dead_worker_ahead_comes_back_when_its_lease_ends_to_a_scheduler_behind(dist, scheduler):
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=4)
    (dist.ready_dir / "hold-0").touch()
    [ahead] = dist.start_workers(queues=("lg.tools",), concurrency=1, DIST_APP_CLOCK_SKEW=AHEAD)
    execution = dist_app.GateAgent.start_execution("Pass the gates.")
    dist.wait_for_hang("gate-0")
    kill_whole(ahead)  # its lease, written five minutes ahead, must still end LEASE seconds from its last renewal
    (dist.ready_dir / "hold-0").unlink()
    dist.start_workers(queues=("lg.tools",), concurrency=1, DIST_APP_CLOCK_SKEW=BEHIND)

    assert execution.wait(timeout=60).outcome == "completed"
    assert "re-dispatched" in scheduler.text()  # nothing else brings a dead worker's step back
    assert _gate_calls(dist) == [0, 0, 1, 2]  # gate 0 again: its first call died before its commit
    assert _tool_attempts(dist, execution.run_id) == [2, 1, 1]
