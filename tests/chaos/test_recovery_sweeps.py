"""Each recovery sweep on its own, against real PostgreSQL and Redis, with no worker running.

Without workers nothing executes, so each test sets up exactly the state a
crash would leave (a lost message, a dead claim, a passed deadline), runs one
scheduler pass in this process and looks at the store and at the Redis queues
the scheduler published to.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import dist_app
import pytest
import redis as redis_lib
from sqlalchemy import text

from lg_core import Configuration
from lg_core.errors import ConfigurationError, InvocationError
from lg_core.lease_holders import hostname
from lg_scheduler import recovery
from lg_scheduler.scheduler import COUNT_NAMES, Scheduler
from lg_scheduler.tasks import beat_schedule

FIRST = "root/turn-0/model"


@pytest.fixture
def client(chaos_env):
    connection = redis_lib.Redis.from_url(chaos_env.redis.url)
    yield connection
    connection.close()


def _scheduler(dist, **options) -> Scheduler:
    return Scheduler(dist.config.runtime(), **options)


def _wait_until(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _queued(client, queue: str) -> int:
    return client.llen(queue)


def _dead_holder() -> str:
    """The holder string of a process on this host that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{hostname()}:{child.pid}:1"


def _sql(dist, statement: str, **params) -> None:
    with dist.config.runtime().store.db.engine.begin() as connection:
        connection.execute(text(statement), params)


def test_the_relay_resends_a_lost_message_once_per_grace(chaos_env, client):
    execution = dist_app.StepAgent.start_execution("go")
    client.flushall()  # the first step's message is lost
    scheduler = _scheduler(chaos_env)
    assert scheduler.run_once()["relayed"] == 0  # not due yet: the message may still be on its way

    store = chaos_env.config.runtime().store
    _wait_until(lambda: scheduler.run_once()["relayed"] == 1)
    assert _queued(client, "lg.model") == 1
    assert scheduler.run_once()["relayed"] == 0  # pushed a grace ahead
    assert store.load_step(execution.run_id, FIRST).status == "scheduled"


def test_the_relay_leaves_local_runs_to_their_process(chaos_env, client):
    runtime = chaos_env.config.runtime()
    run = dist_app.StepAgent.build_run("go")
    runtime.begin(run)  # a local run: held by this process, its steps are not the workers'
    _sql(chaos_env, "update lg_steps set dispatch_after = 0 where run_id = :run_id", run_id=run.id)
    assert _scheduler(chaos_env).run_once()["relayed"] == 0
    assert _queued(client, "lg.model") == 0


def test_a_dead_holder_on_this_host_is_redispatched_at_once_and_only_once(chaos_env, client):
    execution = dist_app.StepAgent.start_execution("go")
    client.flushall()
    store = chaos_env.config.runtime().store
    assert store.claim_step(execution.run_id, FIRST, _dead_holder(), lease_seconds=300) == 1

    # Judged by its lease alone (as from another host), the claim is still valid.
    assert _scheduler(chaos_env, local_liveness=False).run_once()["redispatched"] == 0
    scheduler = _scheduler(chaos_env)
    assert scheduler.run_once()["redispatched"] == 1
    assert _queued(client, "lg.model") == 1
    assert scheduler.run_once()["redispatched"] == 0  # held off until someone claims it


def _backoff(dist, run_id: str, before: float, after: float) -> float:
    """How far past the store's clock (read ``before`` and ``after`` a pass) the pass pushed the first step."""
    with dist.config.runtime().store.db.engine.connect() as connection:
        ahead = connection.execute(
            text("select dispatch_after from lg_steps where run_id = :run_id and key = :key"),
            {"run_id": run_id, "key": FIRST},
        ).scalar()
    assert ahead - after <= ahead - before
    return ahead - after


def test_a_dead_holders_step_nobody_takes_is_redispatched_ever_more_rarely(chaos_env, client):
    """The whole model fleet is down: its killed worker's step is re-sent at once, then after a
    hold-off, then after twice as long, not every hold-off for as long as the outage lasts."""
    execution = dist_app.StepAgent.start_execution("go")
    client.flushall()
    store = chaos_env.config.runtime().store
    store.claim_step(execution.run_id, FIRST, _dead_holder(), lease_seconds=300)
    hold_off = 100.0
    scheduler = _scheduler(chaos_env, hold_off=hold_off)

    delays = []
    for send in range(1, 4):
        before = store.clock()
        assert scheduler.run_once()["redispatched"] == 1  # the first: as soon as the holder is seen dead
        delays.append(_backoff(chaos_env, execution.run_id, before, store.clock()))
        assert _queued(client, "lg.model") == send
        assert scheduler.run_once()["redispatched"] == 0  # nothing until its back-off passes
        _sql(
            chaos_env,
            "update lg_steps set dispatch_after = 0 where run_id = :run_id and key = :key",
            run_id=execution.run_id,
            key=FIRST,
        )

    # Pushed by 100, 100 and 200 s (less the moments the pass took): never back to one hold-off.
    assert hold_off - 30 < delays[0] <= hold_off and hold_off - 30 < delays[1] <= hold_off
    assert 2 * hold_off - 30 < delays[2] <= 2 * hold_off


def test_the_stall_detector_leaves_a_step_waiting_in_the_relay_backoff(chaos_env, client):
    """A run quiet because no worker consumes its queue is not stalled: the relay re-sends its
    step on a back-off, and the detector must not add a message per stall period on top."""
    execution = dist_app.StepAgent.start_execution("go")
    client.flushall()
    _sql(
        chaos_env,
        "update lg_steps set dispatch_after = 0 where run_id = :run_id and key = :key",
        run_id=execution.run_id,
        key=FIRST,
    )
    assert _scheduler(chaos_env).run_once()["relayed"] == 1
    client.flushall()
    _sql(chaos_env, "update lg_runs set updated_at = 0 where id = :run_id", run_id=execution.run_id)

    counts = _scheduler(chaos_env, stall_seconds=60).run_once()
    assert (counts["relayed"], counts["advanced"], counts["orphaned"]) == (0, 0, 0)
    assert _queued(client, "lg.model") == _queued(client, "lg.orchestrate") == 0


def test_an_expired_lease_on_another_host_is_redispatched(chaos_env, client):
    execution = dist_app.StepAgent.start_execution("go")
    client.flushall()
    store = chaos_env.config.runtime().store
    store.claim_step(execution.run_id, FIRST, "another-host:4242:1", lease_seconds=300)
    scheduler = _scheduler(chaos_env)
    assert scheduler.run_once()["redispatched"] == 0  # presumed alive while its lease lasts

    _sql(
        chaos_env,
        "update lg_steps set lease_until = 0 where run_id = :run_id",
        run_id=execution.run_id,
    )
    assert scheduler.run_once()["redispatched"] == 1
    assert _queued(client, "lg.model") == 1


def test_a_passed_deadline_ends_the_run_partial_with_one_terminal_event(chaos_env):
    execution = dist_app.StepAgent.start_execution("go", deadline=0.5)
    store = chaos_env.config.runtime().store
    _wait_until(lambda: time.time() > store.load_run(execution.run_id).deadline_at)

    assert _scheduler(chaos_env).run_once()["partial"] == 1
    assert _scheduler(chaos_env).run_once()["partial"] == 0  # a second scheduler finds it ended
    run = execution.wait(timeout=30)
    assert run.outcome == "partial"
    events = run.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events if e.type.startswith("run_")] == ["run_partial"]
    assert any(e.type == "run_partial" for e in execution.events())  # live readers are told too


def test_a_deadline_is_left_to_a_live_step(chaos_env):
    execution = dist_app.StepAgent.start_execution("go", deadline=0.5)
    store = chaos_env.config.runtime().store
    store.claim_step(execution.run_id, FIRST, "another-host:4242:1", lease_seconds=300)
    _wait_until(lambda: time.time() > store.load_run(execution.run_id).deadline_at)

    assert _scheduler(chaos_env).run_once()["partial"] == 0
    assert store.load_run(execution.run_id).status == "running"


def test_a_cancel_nobody_acts_on_ends_the_run_and_drops_its_interjections(chaos_env):
    execution = dist_app.StepAgent.start_execution("go")
    execution.interject("one more thing")
    execution.cancel()

    counts = _scheduler(chaos_env).run_once()
    assert counts["cancelled"] == 1
    run = execution.wait(timeout=30)
    assert run.outcome == "cancelled"
    assert [e.type for e in run.events()][-1] == "run_cancel"
    assert chaos_env.config.runtime().store.pending_interjections(execution.run_id) == []


def test_a_stalled_run_is_advanced_and_an_orphaned_one_is_reported(chaos_env, client, caplog):
    stalled = dist_app.StepAgent.start_execution("go")
    orphan = dist_app.StepAgent.start_execution("go")
    client.flushall()
    # Due, and never sent by the relay (as when a relay pass stopped at its limit).
    _sql(chaos_env, "update lg_steps set dispatch_after = 0 where run_id = :run_id", run_id=stalled.run_id)
    _sql(
        chaos_env,
        "update lg_steps set status = 'succeeded' where run_id = :run_id and key = :key",
        run_id=orphan.run_id,
        key=FIRST,
    )
    time.sleep(0.05)

    store = chaos_env.config.runtime().store
    publisher = _scheduler(chaos_env).publisher
    assert recovery.detect_stalled(store, publisher, stall_seconds=0.01) == (1, 1)
    assert _queued(client, "lg.model") == 1  # the stalled run's step, which nothing had re-sent
    assert f"run {orphan.run_id} is running but has no open step" in caplog.text


def test_the_stall_detector_leaves_a_step_waiting_out_its_retry_delay(chaos_env, client):
    """A step whose attempt failed waits its retry delay (up to a minute) before the relay sends
    it again; a stall period shorter than that must not send it early."""
    execution = dist_app.StepAgent.start_execution("go")
    client.flushall()
    store = chaos_env.config.runtime().store
    holder = "another-host:4242:1"
    store.claim_step(execution.run_id, FIRST, holder, lease_seconds=300)
    assert store.release_failed_step(execution.run_id, FIRST, holder, {"class": "RuntimeError"}, delay=30)
    time.sleep(0.05)

    counts = _scheduler(chaos_env, stall_seconds=0.01).run_once()
    assert (counts["relayed"], counts["advanced"], counts["orphaned"]) == (0, 0, 0)
    assert _queued(client, "lg.model") == 0

    _sql(chaos_env, "update lg_steps set dispatch_after = 0 where run_id = :run_id", run_id=execution.run_id)
    assert _scheduler(chaos_env, stall_seconds=0.01).run_once()["relayed"] == 1  # once due, the relay sends it
    assert _queued(client, "lg.model") == 1


def test_run_forever_sweeps_until_stopped(chaos_env):
    execution = dist_app.StepAgent.start_execution("go")
    execution.cancel()
    stop = threading.Event()
    thread = threading.Thread(target=_scheduler(chaos_env).run_forever, kwargs={"interval": 0.05, "stop": stop})
    thread.start()
    try:
        assert execution.wait(timeout=30).outcome == "cancelled"
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_counts_name_every_sweep(chaos_env):
    assert set(_scheduler(chaos_env).run_once()) == set(COUNT_NAMES)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stall_seconds": 0}, "stall_seconds must be a positive number"),
        ({"stall_seconds": float("nan")}, "stall_seconds must be a positive number"),
        ({"hold_off": -1}, "hold_off must be a positive number"),
        ({"batch": 0}, "batch must be a positive integer"),
        ({"batch": 2.5}, "batch must be a positive integer"),
    ],
)
def test_bad_scheduler_options_are_configuration_errors(chaos_env, options, message):
    with pytest.raises(ConfigurationError, match=message):
        _scheduler(chaos_env, **options)


@pytest.mark.parametrize("interval", [0, -1, float("inf"), "1", True])
def test_bad_intervals_are_configuration_errors(chaos_env, interval):
    with pytest.raises(ConfigurationError, match="positive number of seconds"):
        _scheduler(chaos_env).run_forever(interval=interval)
    with pytest.raises(ConfigurationError, match="positive number of seconds"):
        beat_schedule(interval)


def test_a_scheduler_needs_a_broker():
    configuration = Configuration(run_store="sqlite://", broker_url=None)
    try:
        with pytest.raises(ConfigurationError, match="needs broker_url"):
            Scheduler(configuration.runtime())
    finally:
        configuration.close()


def test_end_run_only_ends_runs_as_failed_partial_or_cancelled(chaos_env):
    execution = dist_app.StepAgent.start_execution("go")
    engine = chaos_env.config.runtime().engine
    with pytest.raises(InvocationError, match="failed, partial or cancelled"):
        engine.end_run(execution.run_id, "completed", None)
    assert engine.end_run(execution.run_id, "failed", RuntimeError("boom")) is True
    # A second ending (another scheduler, a racing step) changes nothing.
    assert engine.end_run(execution.run_id, "failed", RuntimeError("boom")) is False
    assert execution.wait(timeout=30).outcome == "failed"


def test_celery_beat_drives_recovery_through_lg_recover(chaos_env):
    """No `lg scheduler`: beat sends lg.recover, an orchestrate worker runs a pass."""
    chaos_env.start_workers(
        queues=("lg.orchestrate",),
        pool="threads",
        concurrency=2,
        LG_IMPORTS="dist_app,lg_scheduler.tasks",
    )
    log = chaos_env.tmp_path / "beat.log"
    with log.open("w") as handle:
        beat = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "lg_scheduler.beat",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(chaos_env.tmp_path / "beat-schedule"),
            ],
            env=chaos_env.env(),
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        try:
            # No model worker: only recovery can end this run.
            execution = dist_app.StepAgent.start_execution("go")
            execution.cancel()
            assert execution.wait(timeout=60).outcome == "cancelled"
        finally:
            beat.terminate()
            beat.wait(timeout=15)
    assert "lg.recover" in log.read_text()


def test_a_dead_claim_is_redispatched_behind_more_live_claims_than_a_pass_reads(chaos_env, client):
    """A fleet runs more steps at once than one pass reads (``batch``): the pass must read
    the claims that may be dead first, not whichever live ones the table returns first."""
    store = chaos_env.config.runtime().store
    live = [dist_app.StepAgent.start_execution("go") for _ in range(4)]
    dead = dist_app.StepAgent.start_execution("go")
    client.flushall()
    for execution in live:  # workers on another host, renewing their leases
        store.claim_step(execution.run_id, FIRST, "another-host:4242:1", lease_seconds=300)
    store.claim_step(dead.run_id, FIRST, "another-host:4343:1", lease_seconds=300)
    _sql(chaos_env, "update lg_steps set lease_until = 0 where run_id = :run_id", run_id=dead.run_id)

    assert _scheduler(chaos_env, batch=2).run_once()["redispatched"] == 1
    assert _queued(client, "lg.model") == 1


def test_the_stall_detector_takes_at_most_a_batch_per_pass(chaos_env, client):
    """Like every other sweep, one pass advances at most ``batch`` stalled runs: a fleet
    whose runs all look stalled at once is taken a slice per pass, so the pass stays short
    and its other sweeps keep running."""
    for _ in range(3):
        dist_app.StepAgent.start_execution("go")
    client.flushall()
    # All three quiet for a minute, their steps due and never sent (as behind a relay that
    # stopped at its own limit); the two touched by the first pass do not look stalled for
    # 30 s, however long the passes take on a loaded machine.
    _sql(chaos_env, "update lg_runs set updated_at = updated_at - 60")
    _sql(chaos_env, "update lg_steps set dispatch_after = 0")

    store = chaos_env.config.runtime().store
    publisher = _scheduler(chaos_env).publisher
    assert recovery.detect_stalled(store, publisher, stall_seconds=30, limit=2) == (2, 0)
    assert recovery.detect_stalled(store, publisher, stall_seconds=30, limit=2) == (1, 0)  # the rest, next pass
    assert _queued(client, "lg.model") == 3


def test_runs_a_live_step_will_end_do_not_keep_others_from_ending(chaos_env):
    """A cancelled run whose step is live is left to that step; it must not take the slot
    of a cancelled run nothing works on, or a pass (``batch``) of such runs ends nothing."""
    store = chaos_env.config.runtime().store
    busy = dist_app.StepAgent.start_execution("go")
    store.claim_step(busy.run_id, FIRST, "another-host:4242:1", lease_seconds=300)
    idle = dist_app.StepAgent.start_execution("go")
    busy.cancel()
    idle.cancel()

    counts = _scheduler(chaos_env, batch=1).run_once()
    assert counts["cancelled"] == 1
    assert store.load_run(idle.run_id).status == "cancelled"
    assert store.load_run(busy.run_id).status == "running"
