"""The outbox relay backs off per step: a step no worker consumes is re-sent ever more rarely.

Runs on a SQLite file and on PostgreSQL. A step is made due by moving its
``dispatch_after`` into the past (the store's clock is PostgreSQL's, which a
test cannot move), and each back-off is read back as ``dispatch_after`` minus
the store's clock around the relay's pass, so nothing here waits for a grace.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from sqlalchemy import text

from lg_core.store import RunStore
from lg_core.store import resend_backoff as backoff
from lg_scheduler.recovery import relay_outbox
from tests.engine.numbered_tool import RecordingPublisher
from tests.store.outbox_steps import create_distributed_run, make_due, step_column

GRACE, CAP = 10.0, 35.0
MODEL_KEY, TOOL_KEY = "root/turn-0/model", "root/turn-1/tool/call_1"


@pytest.fixture
def store(durable_url):
    opened = RunStore(durable_url, relay_grace=GRACE, relay_backoff_max=CAP)
    yield opened
    opened.close()


def _relay_and_measure(
    store: RunStore, publisher: RecordingPublisher, run_id: str = "r1", key: str = MODEL_KEY
) -> float:
    """Make the step due, run the relay, and return the back-off it was pushed by (by the store's clock).

    The push is from the store's "now" during the pass, between two clock reads around it:
    the delay that fits that window is returned (the raw window's upper end if none does).
    """
    make_due(store, run_id, key)
    before = store.clock()
    assert relay_outbox(store, publisher) == 1
    after = store.clock()
    ahead = step_column(store, "dispatch_after", run_id, key)
    fits = [d for d in (GRACE, 2 * GRACE, 4 * GRACE, CAP) if ahead - after - 0.001 <= d <= ahead - before + 0.001]
    return fits[0] if len(fits) == 1 else ahead - before


def test_a_step_nobody_consumes_is_sent_again_after_a_doubling_delay_up_to_the_cap(store):
    create_distributed_run(store)
    publisher = RecordingPublisher()

    delays = [_relay_and_measure(store, publisher) for _ in range(5)]

    assert delays == [GRACE, 2 * GRACE, CAP, CAP, CAP]  # 10, 20, then 40 capped at 35
    assert [ref.key for ref in publisher.sent] == [MODEL_KEY] * 5  # one message per send, not per pass
    assert step_column(store, "relays") == 5


def test_a_due_step_is_sent_once_until_its_backoff_passes(store):
    create_distributed_run(store)
    publisher = RecordingPublisher()
    _relay_and_measure(store, publisher)
    _relay_and_measure(store, publisher)

    for _ in range(3):  # every scheduler tick until then finds nothing to send
        assert relay_outbox(store, publisher) == 0
    assert len(publisher.sent) == 2


def test_a_claim_resets_the_backoff(store):
    create_distributed_run(store)
    publisher = RecordingPublisher()
    assert [_relay_and_measure(store, publisher) for _ in range(3)] == [GRACE, 2 * GRACE, CAP]

    assert store.claim_step("r1", MODEL_KEY, "host:1:1", lease_seconds=30) == 1  # a worker came up
    assert step_column(store, "relays") == 0
    # Its attempt raised: scheduled again, and the relay delivers it after the retry delay.
    assert store.release_failed_step("r1", MODEL_KEY, "host:1:1", {"name": "RuntimeError", "attempt": 1}, delay=1)

    assert [_relay_and_measure(store, publisher) for _ in range(3)] == [GRACE, GRACE, 2 * GRACE]


def test_the_send_that_delivers_a_retry_is_not_a_miss(store):
    create_distributed_run(store)
    store.claim_step("r1", MODEL_KEY, "host:1:1", lease_seconds=30)
    store.release_failed_step("r1", MODEL_KEY, "host:1:1", {"name": "RuntimeError", "attempt": 1}, delay=1)
    make_due(store)

    [delivery] = store.relay_due_steps()
    assert (delivery.missed, delivery.delay, delivery.new_level) == (0, GRACE, False)
    assert delivery.step.awaits_retry
    make_due(store)
    [missed] = store.relay_due_steps()  # that message found no consumer within a grace either
    assert (missed.missed, missed.delay, missed.waited) == (1, GRACE, GRACE)


def test_each_backoff_level_is_reported_once_naming_the_queue_and_the_worker_to_start(store, caplog):
    create_distributed_run(store, "r1")
    create_distributed_run(store, "r2", (("tool", TOOL_KEY),))
    publisher = RecordingPublisher()

    with caplog.at_level(logging.DEBUG, logger="lg_scheduler.recovery"):
        for _ in range(6):
            _relay_and_measure(store, publisher, "r1", MODEL_KEY)
            _relay_and_measure(store, publisher, "r2", TOOL_KEY)

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    model = [m for m in warnings if "of run r1" in m]
    tool = [m for m in warnings if "of run r2" in m]
    # Misses 2 (20 s) and 3 (35 s, the cap) each moved the step to a longer delay; 4 to 6 did not.
    assert len(model) == len(tool) == 2, warnings
    assert f"step {MODEL_KEY} of run r1 has waited at least 20 s for a consumer on queue lg.model" in model[0]
    assert "again in 35 s" in model[1] and "at least 40 s" in model[1]
    assert all("`lg worker --queues lg.model`" in m for m in model)
    assert all("on queue lg.tools" in m and "`lg worker --queues lg.tools`" in m for m in tool)
    # The first send says why, as before; the sends at the cap are not logged above debug.
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert sorted(infos) == sorted(
        f"relayed {key} of run {run} (its message was not delivered)"
        for run, key in (("r1", MODEL_KEY), ("r2", TOOL_KEY))
    )


def _relay_at_once(stores: list[RunStore]) -> list[str]:
    """Every store's relay pass, started together on its own thread; the run ids each sent, in one list."""
    sent: list[list[str]] = [[] for _ in stores]
    barrier = threading.Barrier(len(stores))

    def relay(index: int) -> None:
        barrier.wait()
        sent[index].extend(r.step.run_id for r in stores[index].relay_due_steps())

    threads = [threading.Thread(target=relay, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [run_id for part in sent for run_id in part]


def test_concurrent_relays_count_every_send_once(durable_url):
    """Several schedulers relaying at once: each due step is sent by one of them, and counted once."""
    stores = [RunStore(durable_url, relay_grace=GRACE, relay_backoff_max=CAP) for _ in range(4)]
    try:
        run_ids = [f"r{i}" for i in range(40)]
        for run_id in run_ids:
            create_distributed_run(stores[0], run_id)
        for _round in range(2):
            with stores[0].db.engine.begin() as conn:
                conn.execute(
                    text("UPDATE lg_steps SET dispatch_after = :t WHERE status = 'scheduled'"),
                    {"t": stores[0].clock() - 1},
                )
            assert sorted(_relay_at_once(stores)) == sorted(run_ids)
        with stores[0].db.engine.connect() as conn:
            assert conn.execute(
                text("SELECT DISTINCT relays FROM lg_steps WHERE status = 'scheduled'")
            ).scalars().all() == [2]
    finally:
        for opened in stores:
            opened.close()


def test_an_hour_without_a_consumer_costs_a_handful_of_duplicates(tmp_path, monkeypatch):
    """On SQLite the store's clock is the host's: an hour of one-second scheduler ticks, simulated."""
    clock = [time.time()]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}", relay_grace=30, relay_backoff_max=300)
    try:
        create_distributed_run(store)
        publisher = RecordingPublisher()
        for _tick in range(3600):
            clock[0] += 1
            relay_outbox(store, publisher)
    finally:
        store.close()
    # Sends at 30, 60, 120, 240, 480, 780, 1080 ... 3480 s: 15, where a fixed grace sent 119.
    assert len(publisher.sent) == 15


def test_the_backoff_policy():
    assert [backoff.delay(m, 30, 300) for m in range(0, 7)] == [30, 30, 60, 120, 240, 300, 300]
    assert [backoff.waited(m, 30, 300) for m in range(0, 7)] == [0, 30, 60, 120, 240, 480, 780]
    assert backoff.waited(10_000, 30, 300) == 480 + 300 * (10_000 - 5)  # no loop over every miss
    assert [backoff.new_level(m, 30, 300) for m in range(0, 7)] == [False, True, True, True, True, True, False]
    assert backoff.delay(5, 30, 10) == 30  # a cap below the grace: the grace still holds
    assert backoff.delay(10**6, 1, 300) == 300
