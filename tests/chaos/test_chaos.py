"""Chaos: SIGKILL workers mid-step, wipe Redis, die between commit and publish; every run completes.

Each scenario runs a StepAgent (idempotent tool) and a ChargeAgent (at_most_once
tool) side by side, breaks something while they are in flight, and checks the
invariants of chaos_checks. The time from the fault to each run's next
committed step is printed (run with -s to see it).
"""

from __future__ import annotations

import os
import signal
import time

import dist_app
import pytest
from chaos_checks import (
    Watchers,
    check_runs,
    describe,
    kill_whole,
    recovery_times,
    store_of,
    wait_all,
    wait_for_calls,
    wait_ready,
)

from lg_core import Agent

pytestmark = pytest.mark.chaos

REDIS_DOWN_SECONDS = 12.0
HANG_TOOLS = {"DIST_APP_HANG": "step:2,charge:2", "DIST_APP_HANG_ONCE": "1"}


def _start(*agents: type[Agent]) -> tuple[list, dict[str, int]]:
    executions = [agent.start_execution(f"Run {agent.__name__} to the end.") for agent in agents]
    return executions, {e.run_id: dist_app.TURNS for e in executions}


def _report(name: str, dist, run_ids: list[str], moment: float) -> None:
    print(
        f"\n[chaos] {name}: fault -> next committed step: {describe(recovery_times(store_of(dist), run_ids, moment))}"
    )


def _assert_sound(verdict) -> None:
    assert verdict.unfinished == [] and verdict.problems == [], "\n".join(verdict.unfinished + verdict.problems)


def _kill_the_pool_children_in_tool_calls(dist, name: str) -> None:
    """Run a StepAgent and a ChargeAgent until their third tool call hangs, SIGKILL the pool
    children running those calls, and check both runs: the idempotent call ran again, the
    at_most_once one ended with an unknown outcome, nothing else repeated or went missing."""
    executions, turns = _start(dist_app.StepAgent, dist_app.ChargeAgent)
    children = wait_ready(dist, "step-2", 1) + wait_ready(dist, "charge-2", 1)

    killed_at = time.time()
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    wait_all(executions, timeout=90)

    verdict = check_runs(dist, turns)
    _assert_sound(verdict)
    [step_run, charge_run] = [e.run_id for e in executions]
    assert verdict.repeated_calls == [next(k for _t, n, k in dist.calls() if k.startswith(step_run) and n == 2)]
    assert [k.split("/", 1)[0] for k in verdict.unknown_outcomes] == [charge_run]
    _report(name, dist, list(turns), killed_at)


def test_a_killed_pool_child_mid_tool_call_is_taken_over(dist, scheduler):
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=8)
    dist.start_workers(queues=("lg.tools",), pool="prefork", concurrency=2, **HANG_TOOLS)
    _kill_the_pool_children_in_tool_calls(dist, "pool child killed mid tool call")


def test_a_pool_child_killed_in_a_step_it_ran_itself_comes_back_without_a_scheduler(dist):
    """A prefork worker consuming both step queues runs each run's steps in one task
    (lg_workers.continuation), so the tool call hangs in a step no message was sent for.
    Killed there, the child's redelivered message (its own step long done) re-announces
    the step its dead holder left: the run goes on with no scheduler running."""
    dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=2)
    dist.start_workers(queues=("lg.model", "lg.tools"), pool="prefork", concurrency=2, **HANG_TOOLS)
    _kill_the_pool_children_in_tool_calls(dist, "pool child killed in a step it took itself, no scheduler")


def test_a_whole_worker_killed_mid_model_turn_is_redispatched(dist, scheduler):
    dist.start_workers(queues=("lg.orchestrate", "lg.tools"), pool="threads", concurrency=4)
    [hanging] = dist.start_workers(queues=("lg.model",), concurrency=8, DIST_APP_HANG="model:2", DIST_APP_HANG_ONCE="1")
    executions = [agent.start_execution("Go.") for agent in (dist_app.HangStepAgent, dist_app.HangChargeAgent)]
    turns = {e.run_id: dist_app.TURNS for e in executions}
    wait_ready(dist, "model-2", 2)
    dist.start_workers(queues=("lg.model",), concurrency=8)

    killed_at = time.time()
    kill_whole(hanging)
    wait_all(executions, timeout=90)

    verdict = check_runs(dist, turns)
    _assert_sound(verdict)
    assert verdict.repeated_calls == [] and verdict.unknown_outcomes == []
    assert verdict.model_retries == 2  # each interrupted turn announced its re-execution
    for run_id in turns:
        assert store_of(dist).load_step(run_id, "root/turn-2/model").attempts == 2
    # A killed thread-pool worker's messages stay unacked in Redis: only the sweeper helps.
    assert "re-dispatched" in scheduler.text()
    _report("whole model worker killed mid model turn", dist, list(turns), killed_at)


@pytest.mark.parametrize(
    "scheduler",
    [[], ["--no-local-liveness"]],
    ids=["dead-holder-on-this-host", "lease-expiry"],
    indirect=True,
)
def test_a_whole_worker_killed_mid_tool_call_is_redispatched(dist, scheduler):
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=8)
    [hanging] = dist.start_workers(queues=("lg.tools",), concurrency=2, **HANG_TOOLS)
    executions, turns = _start(dist_app.StepAgent, dist_app.ChargeAgent)
    wait_ready(dist, "step-2", 1)
    wait_ready(dist, "charge-2", 1)
    dist.start_workers(queues=("lg.tools",), concurrency=2)

    killed_at = time.time()
    kill_whole(hanging)
    wait_all(executions, timeout=90)

    verdict = check_runs(dist, turns)
    _assert_sound(verdict)
    [step_run, charge_run] = [e.run_id for e in executions]
    assert [k.split("/", 1)[0] for k in verdict.repeated_calls] == [step_run]
    assert [k.split("/", 1)[0] for k in verdict.unknown_outcomes] == [charge_run]
    # Nothing else brings a dead worker's step back.
    assert "re-dispatched" in scheduler.text()
    _report(
        "whole tools worker killed mid tool call "
        + ("(lease expiry)" if "--no-local-liveness" in scheduler.process.args else "(dead holder on this host)"),
        dist,
        list(turns),
        killed_at,
    )


def _six_runs_on_supervised_workers(dist) -> tuple[list, dict[str, int]]:
    """Workers deployed as `lg worker` (tools slowed to 0.3 s a call) and six runs on them, three
    with an at_most_once tool. Supervised because Celery sometimes gives up when the broker
    restarts under it (kombu fails to restore its unacked messages: "Unrecoverable error"),
    and the supervisor starts it again; bare Celery workers would stay down."""
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=8, supervised=True)
    dist.start_workers(queues=("lg.tools",), concurrency=2, supervised=True, DIST_APP_TOOL_DELAY="0.3")
    return _start(*[dist_app.StepAgent, dist_app.ChargeAgent] * 3)


def test_runs_in_flight_complete_when_redis_is_wiped(dist, scheduler):
    executions, turns = _six_runs_on_supervised_workers(dist)
    wait_for_calls(dist, 6)

    queued = _queued_messages(dist)
    wiped_at = time.time()
    dist.redis.restart(wipe=True)
    wait_all(executions, timeout=120)

    verdict = check_runs(dist, turns)
    _assert_sound(verdict)
    assert queued > 0, "nothing was queued when Redis was wiped; the scenario lost no message"
    assert "relayed" in scheduler.text()  # the lost messages came back from the outbox
    assert all(store_of(dist).load_run(run_id).finished_at > wiped_at for run_id in turns)
    _report("redis-server restarted with its data wiped", dist, list(turns), wiped_at)


def test_runs_and_readers_go_on_while_redis_is_down_and_comes_back_empty(dist, scheduler):
    """Redis is gone for 12 s (workers cannot fetch or publish, readers lose the live stream),
    then comes back with nothing in it: every run completes from the store's outbox, and the
    readers in this process (events, async events, wait) see each run to its end."""
    executions, turns = _six_runs_on_supervised_workers(dist)
    wait_for_calls(dist, 6)
    watchers = Watchers(executions[:3])

    dist.redis.process.kill()
    dist.redis.process.wait()
    time.sleep(REDIS_DOWN_SECONDS)
    dist.redis.restart(wipe=True)
    back_at = time.time()
    wait_all(executions, timeout=180)

    _assert_sound(check_runs(dist, turns))
    assert watchers.results(timeout=60) == {"events": "run_stop", "async events": "run_stop", "wait": "completed"}
    _report(f"redis-server down {REDIS_DOWN_SECONDS:.0f} s, back empty", dist, list(turns), back_at)


def _start_until_the_fault(marker) -> tuple[list, dict[str, int], float]:
    """Start a StepAgent and a ChargeAgent and wait until a worker died at its LG_FAULT point
    (it created ``marker``); returns the executions, their turns and when it died."""
    executions, turns = _start(dist_app.StepAgent, dist_app.ChargeAgent)
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), "no worker reached the fault point"
    return executions, turns, marker.stat().st_mtime


def test_a_crash_between_commit_and_publish_is_relayed(dist, scheduler):
    marker = dist.tmp_path / "fault-fired"
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=8)
    dist.start_workers(
        queues=("lg.tools",),
        pool="threads",
        concurrency=4,
        LG_FAULT="after_commit",
        LG_FAULT_ONCE=str(marker),
    )
    executions, turns, killed_at = _start_until_the_fault(marker)
    dist.start_workers(queues=("lg.tools",), concurrency=2)
    wait_all(executions, timeout=90)

    verdict = check_runs(dist, turns)
    _assert_sound(verdict)
    # The successor's message was never sent: only the relay sends it.
    assert "relayed" in scheduler.text()
    _report("worker killed between commit and publish", dist, list(turns), killed_at)


def test_a_crash_after_a_commit_that_claimed_the_next_step_is_redispatched(dist, scheduler):
    """A worker consuming every queue runs each run's steps one after another, and each commit
    claims the next step for it (lg_core.engine._preclaim). Killed right after such a commit, it
    leaves that step held by a dead process rather than in the outbox: the sweeper brings it back."""
    marker = dist.tmp_path / "fault-fired"
    every_queue = ("lg.orchestrate", "lg.model", "lg.tools")
    # One thread: the only step in flight at the kill is the one the killed commit claimed.
    dist.start_workers(
        queues=every_queue, pool="threads", concurrency=1, LG_FAULT="after_commit", LG_FAULT_ONCE=str(marker)
    )
    executions, turns, killed_at = _start_until_the_fault(marker)
    dist.start_workers(queues=every_queue, pool="threads", concurrency=4)
    wait_all(executions, timeout=90)

    verdict = check_runs(dist, turns)
    _assert_sound(verdict)
    assert verdict.repeated_calls == [] and verdict.unknown_outcomes == []
    # The killed commit's successor was claimed by it, not left in the outbox for the relay to
    # send (as a commit that claims nothing leaves it): its second attempt ran it.
    retried = [s for run_id in turns for s in store_of(dist).load_steps(run_id) if s.attempts > 1]
    assert [s.attempts for s in retried] == [2], retried
    assert "re-dispatched" in scheduler.text()
    _report("worker killed after a commit that claimed the next step", dist, list(turns), killed_at)


def _queued_messages(dist) -> int:
    import redis

    client = redis.Redis.from_url(dist.redis.url)
    try:
        return sum(client.llen(queue) for queue in ("lg.orchestrate", "lg.model", "lg.tools"))
    finally:
        client.close()
