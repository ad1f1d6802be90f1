"""The lease sweeper backs off per step, as the relay does, and the stall detector leaves tracked steps alone.

Runs on a SQLite file and on PostgreSQL. A dead holder is a process on this
host that has exited (what a SIGKILLed worker leaves), under a lease that has
not expired: only its death makes the claim sweepable, as in the benchmarked
recovery path. A re-dispatched step is made due again by moving its
``dispatch_after`` into the past (PostgreSQL's clock cannot be moved), and each
back-off is read back as ``dispatch_after`` minus the store's clock around the
sweep, so nothing here waits for a hold-off.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time

import pytest
from sqlalchemy import text

from lg_core.lease_holders import hostname
from lg_core.store import RunStore
from lg_scheduler.recovery import OutageGrace, detect_stalled, relay_outbox, sweep_leases
from tests.engine.numbered_tool import RecordingPublisher
from tests.store.outbox_steps import create_distributed_run, make_due, step_column

HOLD_OFF, CAP, GRACE = 10.0, 35.0, 5.0
MODEL_KEY, TOOL_KEY, OTHER_TOOL_KEY = "root/turn-0/model", "root/turn-1/tool/call_1", "root/turn-1/tool/call_2"
LIVE_HOLDER = "another-host:4242:1"  # presumed alive while its lease lasts


@pytest.fixture
def store(durable_url):
    opened = RunStore(durable_url, relay_grace=GRACE, relay_backoff_max=CAP)
    yield opened
    opened.close()


def _dead_holder() -> str:
    """The holder string of a process on this host that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{hostname()}:{child.pid}:1"


def _held_by_the_dead(store: RunStore, run_id: str = "r1", key: str = MODEL_KEY, kind: str = "model") -> str:
    """A run whose step a worker claimed and then died with (SIGKILL): its lease still runs."""
    create_distributed_run(store, run_id, ((kind, key),))
    holder = _dead_holder()
    assert store.claim_step(run_id, key, holder, lease_seconds=300) == 1
    return holder


def _sql(store: RunStore, statement: str, **params) -> None:
    with store.db.engine.begin() as conn:
        conn.execute(text(statement), params)


def _sweep_and_measure(
    store: RunStore, publisher: RecordingPublisher, run_id: str = "r1", key: str = MODEL_KEY
) -> float:
    """Run the sweep, which must re-send the step, and return the back-off it was pushed by (store's clock)."""
    before = store.clock()
    assert sweep_leases(store, publisher, hold_off=HOLD_OFF) == 1
    after = store.clock()
    ahead = step_column(store, "dispatch_after", run_id, key)
    fits = [d for d in (HOLD_OFF, 2 * HOLD_OFF, CAP) if ahead - after - 0.001 <= d <= ahead - before + 0.001]
    return fits[0] if len(fits) == 1 else ahead - before


def _resend_when_due(store: RunStore, publisher: RecordingPublisher, run_id: str = "r1", key: str = MODEL_KEY) -> float:
    make_due(store, run_id, key)
    return _sweep_and_measure(store, publisher, run_id, key)


def test_the_first_resend_after_a_holder_dies_is_immediate(store):
    _held_by_the_dead(store)
    publisher = RecordingPublisher()

    # No wait at all: the pass that first sees the holder dead re-sends its step.
    assert _sweep_and_measure(store, publisher) == HOLD_OFF
    assert [ref.key for ref in publisher.sent] == [MODEL_KEY]
    assert step_column(store, "relays") == 1


def test_a_dead_holders_step_nobody_takes_is_resent_ever_more_rarely_up_to_the_cap(store):
    _held_by_the_dead(store)
    publisher = RecordingPublisher()

    delays = [_sweep_and_measure(store, publisher)] + [_resend_when_due(store, publisher) for _ in range(4)]

    # The first re-send delivers (a hold-off), then each one nobody took doubles it: 10, 20, 40 capped at 35.
    assert delays == [HOLD_OFF, HOLD_OFF, 2 * HOLD_OFF, CAP, CAP]
    assert [ref.key for ref in publisher.sent] == [MODEL_KEY] * 5  # one message per re-send, not per pass
    assert step_column(store, "relays") == 5
    assert store.load_step("r1", MODEL_KEY).status == "running"  # the sweep never touches the claim itself


def test_passes_within_the_backoff_send_nothing(store):
    _held_by_the_dead(store)
    publisher = RecordingPublisher()
    _sweep_and_measure(store, publisher)
    _resend_when_due(store, publisher)

    for _ in range(3):  # every scheduler tick until the back-off passes finds nothing to send
        assert sweep_leases(store, publisher, hold_off=HOLD_OFF) == 0
    assert len(publisher.sent) == 2


def test_a_claim_resets_the_backoff(store):
    dead = _held_by_the_dead(store)
    publisher = RecordingPublisher()
    assert [_sweep_and_measure(store, publisher)] + [_resend_when_due(store, publisher) for _ in range(2)] == [
        HOLD_OFF, HOLD_OFF, 2 * HOLD_OFF,
    ]  # fmt: skip

    # A worker came up and took the step over; then it was killed too.
    assert store.claim_step("r1", MODEL_KEY, _dead_holder(), lease_seconds=300, stale_holder=dead) == 2
    assert (step_column(store, "relays"), step_column(store, "dispatch_after")) == (0, None)

    # Its step is re-sent at once again, and backs off from the start.
    assert [_sweep_and_measure(store, publisher)] + [_resend_when_due(store, publisher) for _ in range(2)] == [
        HOLD_OFF, HOLD_OFF, 2 * HOLD_OFF,
    ]  # fmt: skip


def test_a_live_claim_is_not_resent(store):
    create_distributed_run(store)
    assert store.claim_step("r1", MODEL_KEY, LIVE_HOLDER, lease_seconds=300) == 1
    publisher = RecordingPublisher()
    assert sweep_leases(store, publisher, hold_off=HOLD_OFF) == 0
    assert (publisher.sent, step_column(store, "relays")) == ([], 0)


def test_each_backoff_level_is_reported_once_naming_the_queue_and_the_worker_to_start(store, caplog):
    _held_by_the_dead(store, "r1")
    _held_by_the_dead(store, "r2", TOOL_KEY, "tool")
    publisher = RecordingPublisher()

    with caplog.at_level(logging.DEBUG, logger="lg_scheduler.recovery"):
        assert sweep_leases(store, publisher, hold_off=HOLD_OFF) == 2  # both holders seen dead in one pass
        for _ in range(5):
            _resend_when_due(store, publisher, "r1", MODEL_KEY)
            _resend_when_due(store, publisher, "r2", TOOL_KEY)

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    model = [m for m in warnings if "of run r1" in m]
    tool = [m for m in warnings if "of run r2" in m]
    # Re-sends 3 (20 s) and 4 (35 s, the cap) moved the step to a longer delay; 5 and 6 did not.
    assert len(model) == len(tool) == 2, warnings
    assert f"step {MODEL_KEY} of run r1 has waited at least 20 s for a consumer on queue lg.model" in model[0]
    assert "again in 20 s" in model[0]
    assert "at least 40 s" in model[1] and "again in 35 s" in model[1]
    assert all("`lg worker --queues lg.model`" in m for m in model)
    assert all("on queue lg.tools" in m and "`lg worker --queues lg.tools`" in m for m in tool)
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "of run r1" in r.getMessage()]
    assert len(infos) == 2  # the first re-send names the dead holder; the second says nobody took it
    assert "holder" in infos[0] and "is gone" in infos[0]
    assert "no worker took it within 10 s" in infos[1] and "queue lg.model" in infos[1]


def test_an_expired_lease_is_reported_as_expired_not_as_a_dead_holder(store, caplog):
    """A lease also runs out under a live holder that could not renew it (its database was down)."""
    create_distributed_run(store, "r1", (("model", MODEL_KEY),))
    assert store.claim_step("r1", MODEL_KEY, LIVE_HOLDER, lease_seconds=300) == 1
    _sql(store, "UPDATE lg_steps SET lease_until = :t WHERE run_id = 'r1'", t=store.clock() - 30)

    with caplog.at_level(logging.INFO, logger="lg_scheduler.recovery"):
        assert sweep_leases(store, RecordingPublisher(), hold_off=HOLD_OFF) == 1

    [message] = [r.getMessage() for r in caplog.records if "of run r1" in r.getMessage()]
    assert re.search(rf"the lease of holder {re.escape(LIVE_HOLDER)} expired 3\d\.\d s ago", message), message
    assert "is gone" not in message


def test_a_lease_that_expired_during_an_outage_is_spared_while_the_grace_lasts(store):
    """A live holder could not renew its lease while the store was down: it gets the grace to do so."""
    create_distributed_run(store, "r1", (("model", MODEL_KEY),))
    assert store.claim_step("r1", MODEL_KEY, LIVE_HOLDER, lease_seconds=300) == 1
    now = store.clock()
    _sql(store, "UPDATE lg_steps SET lease_until = :t WHERE run_id = 'r1'", t=now - 5)
    publisher = RecordingPublisher()

    during = OutageGrace(began=now - 20, until=now + 60)  # the outage began before the lease ran out
    assert sweep_leases(store, publisher, hold_off=HOLD_OFF, grace=during) == 0
    before = OutageGrace(began=now - 2, until=now + 60)  # it ran out before the outage: judged as ever
    assert sweep_leases(store, publisher, hold_off=HOLD_OFF, grace=before) == 1
    assert [ref.key for ref in publisher.sent] == [MODEL_KEY]


def test_an_outage_grace_that_ran_out_spares_nothing(store):
    create_distributed_run(store, "r1", (("model", MODEL_KEY),))
    assert store.claim_step("r1", MODEL_KEY, LIVE_HOLDER, lease_seconds=300) == 1
    now = store.clock()
    _sql(store, "UPDATE lg_steps SET lease_until = :t WHERE run_id = 'r1'", t=now - 5)
    assert (
        sweep_leases(store, RecordingPublisher(), hold_off=HOLD_OFF, grace=OutageGrace(began=now - 20, until=now - 1))
        == 1
    )


def test_a_holder_seen_dead_is_taken_over_during_an_outage_grace(store):
    _held_by_the_dead(store)
    now = store.clock()
    grace = OutageGrace(began=float("-inf"), until=now + 60)
    assert sweep_leases(store, RecordingPublisher(), hold_off=HOLD_OFF, grace=grace) == 1


def test_two_schedulers_resend_a_dead_claim_once(durable_url):
    """Both read the dead claim in the same pass; the count each read decides who sends it."""
    first, second = (RunStore(durable_url, relay_grace=GRACE, relay_backoff_max=CAP) for _ in range(2))
    try:
        _held_by_the_dead(first)
        [(seen_first, relays_first)] = first.running_steps()
        [(seen_second, relays_second)] = second.running_steps()
        assert first.mark_redispatched(seen_first, relays_first, HOLD_OFF) is not None
        assert second.mark_redispatched(seen_second, relays_second, HOLD_OFF) is None
        assert step_column(first, "relays") == 1
    finally:
        first.close()
        second.close()


def test_an_hour_without_a_consumer_costs_a_handful_of_duplicates(tmp_path, monkeypatch):
    """On SQLite the store's clock is the host's: an hour of one-second scheduler ticks after a
    worker was killed, with the whole fleet down, simulated."""
    clock = [time.time()]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}", relay_backoff_max=300)
    try:
        _held_by_the_dead(store)
        publisher = RecordingPublisher()
        for _tick in range(3600):
            clock[0] += 1
            sweep_leases(store, publisher, hold_off=15)
    finally:
        store.close()
    # Re-sends at 1, 16, 31, 61, 121, 241, 481, 781, 1081 ... 3481 s: 17, where a fixed hold-off sent 240.
    assert len(publisher.sent) == 17


# -- the stall detector -------------------------------------------------------------------


def test_the_stall_detector_resends_only_the_open_steps_nothing_else_sees_to(store):
    publisher = RecordingPublisher()
    # Waiting in the relay's back-off: the relay sent it and will again.
    create_distributed_run(store, "relayed")
    make_due(store, "relayed")
    assert relay_outbox(store, publisher) == 1
    # Held by a live holder under its lease.
    create_distributed_run(store, "held")
    store.claim_step("held", MODEL_KEY, LIVE_HOLDER, lease_seconds=300)
    # Waiting in the lease sweeper's back-off: its holder died and it was re-sent.
    _held_by_the_dead(store, "swept")
    assert sweep_leases(store, publisher, hold_off=HOLD_OFF) == 1
    # Waiting out a failed attempt's retry delay: the relay sends it when it is due.
    create_distributed_run(store, "retrying")
    store.claim_step("retrying", MODEL_KEY, LIVE_HOLDER, lease_seconds=300)
    assert store.release_failed_step("retrying", MODEL_KEY, LIVE_HOLDER, {"class": "RuntimeError"}, delay=60)
    # Nobody's: a due step the relay never sent, a dead claim the sweeper has not reached.
    create_distributed_run(store, "lost")
    create_distributed_run(store, "expired")
    store.claim_step("expired", MODEL_KEY, LIVE_HOLDER, lease_seconds=300)
    _sql(store, "UPDATE lg_steps SET lease_until = 0 WHERE run_id = 'expired'")
    # One step in the relay's back-off, one nobody sent.
    create_distributed_run(store, "mixed", (("tool", TOOL_KEY), ("tool", OTHER_TOOL_KEY)))
    make_due(store, "mixed", TOOL_KEY)
    assert relay_outbox(store, publisher) == 1
    make_due(store, "lost")  # due after the relay's pass: as behind a relay that stopped at its limit
    make_due(store, "mixed", OTHER_TOOL_KEY)
    _sql(store, "UPDATE lg_runs SET updated_at = 0")  # every run is quiet for long
    publisher.sent.clear()

    assert detect_stalled(store, publisher, stall_seconds=60) == (3, 0)

    assert sorted((ref.run_id, ref.key) for ref in publisher.sent) == [
        ("expired", MODEL_KEY), ("lost", MODEL_KEY), ("mixed", OTHER_TOOL_KEY),
    ]  # fmt: skip


def test_a_quiet_run_with_no_open_step_is_still_reported(store, caplog):
    create_distributed_run(store, "orphan")
    _sql(store, "UPDATE lg_steps SET status = 'succeeded'")
    _sql(store, "UPDATE lg_runs SET updated_at = 0")
    publisher = RecordingPublisher()

    assert detect_stalled(store, publisher, stall_seconds=60) == (0, 1)
    assert publisher.sent == []
    assert "run orphan is running but has no open step" in caplog.text
