"""The scheduler's re-sends of a code-mode ``wait`` go to its program's holder while that process lives,
and to plain ``lg.sandbox`` once its holder lease ran out, whatever host it was on.

Runs on a SQLite file and on PostgreSQL. The holders are named for another host,
so their process ids cannot be checked here: only their holder lease decides.
A step is made due by moving its ``dispatch_after`` into the past (PostgreSQL's
clock cannot be moved); a lease is made to run out by writing it a moment long.
"""

from __future__ import annotations

import time

import pytest

from lg_core.store import RunStore
from lg_scheduler.recovery import OutageGrace, relay_outbox, sweep_leases
from tests.engine.numbered_tool import RecordingPublisher
from tests.store.outbox_steps import create_distributed_run, make_due, step_column

GRACE, CAP, LEASE = 5.0, 300.0, 15.0
WAIT_KEY = "root/turn-2/tool/call_wait"
HOLDER = "another-host:4242:1"
HOLDER_QUEUE = f"lg.sandbox.{HOLDER}"


@pytest.fixture
def store(durable_url):
    opened = RunStore(durable_url, relay_grace=GRACE, relay_backoff_max=CAP)
    yield opened
    opened.close()


def _scheduled_wait(store: RunStore, holder: str = HOLDER, run_id: str = "r1") -> None:
    """A run whose model asked to ``wait`` for the program ``holder`` runs: the step is in the outbox."""
    wait = {"name": "wait", "id": "call_wait", "input": {}, "program_holder": holder}
    create_distributed_run(store, run_id, (("code_exec", WAIT_KEY),), inputs={WAIT_KEY: wait})


def _expired_lease(store: RunStore, holder: str = HOLDER) -> None:
    store.renew_holder_lease(holder, 0.05)
    time.sleep(0.1)


def _relayed_queue(store: RunStore, publisher: RecordingPublisher, **options) -> str:
    make_due(store, key=WAIT_KEY)
    assert relay_outbox(store, publisher, holder_backoff=LEASE, **options) == 1
    return publisher.sent[-1].queue


def test_a_wait_whose_holder_on_another_host_let_its_lease_run_out_is_sent_to_lg_sandbox(store):
    _scheduled_wait(store)
    _expired_lease(store)

    assert _relayed_queue(store, RecordingPublisher()) == ""  # plain lg.sandbox: any worker says terminated


def test_a_wait_whose_holder_on_another_host_keeps_its_lease_stays_on_its_queue(store):
    """Alive, however busy its steps keep it: its heartbeat renews the lease, so the wait waits for it."""
    _scheduled_wait(store)
    store.renew_holder_lease(HOLDER, 60)

    publisher = RecordingPublisher()
    assert [_relayed_queue(store, publisher) for _ in range(3)] == [HOLDER_QUEUE] * 3


def test_a_wait_whose_holder_never_held_a_lease_is_sent_to_lg_sandbox(store):
    """A holder without a lease holds no program (it drops its lease when it holds none)."""
    _scheduled_wait(store)

    assert _relayed_queue(store, RecordingPublisher()) == ""


def test_a_holder_lease_a_store_outage_let_expire_is_spared_while_the_grace_lasts(store):
    _scheduled_wait(store)
    _expired_lease(store)
    now = store.clock()
    publisher = RecordingPublisher()

    assert _relayed_queue(store, publisher, grace=OutageGrace(began=now - 60, until=now + 60)) == HOLDER_QUEUE
    assert _relayed_queue(store, publisher, grace=OutageGrace(began=now - 60, until=now - 1)) == ""


def test_a_wait_for_a_holder_backs_off_at_most_a_lease_period_while_other_steps_reach_the_cap(store):
    _scheduled_wait(store)
    create_distributed_run(store, "r2")
    store.renew_holder_lease(HOLDER, 600)
    publisher = RecordingPublisher()

    def backoff(run_id: str, key: str) -> float:
        make_due(store, run_id, key)
        before = store.clock()
        relay_outbox(store, publisher, holder_backoff=LEASE)
        return step_column(store, "dispatch_after", run_id, key) - before

    waits = [backoff("r1", WAIT_KEY) for _ in range(6)]
    models = [backoff("r2", "root/turn-0/model") for _ in range(6)]

    # A grace, then doubling: the wait stops at the lease period, the model turn goes on towards the cap.
    assert waits == pytest.approx([GRACE, 2 * GRACE, LEASE, LEASE, LEASE, LEASE], abs=1.0)
    assert models == pytest.approx([GRACE, 2 * GRACE, 4 * GRACE, 8 * GRACE, 16 * GRACE, 32 * GRACE], abs=1.0)


def test_a_wait_in_a_dead_holders_queue_is_re_sent_to_lg_sandbox_within_about_a_lease_period(store):
    """The holder renews its lease (lease 1 s) while the relay keeps sending the wait to its queue, then
    dies: the next send goes to lg.sandbox about a lease period after its last renewal, not after a
    back-off grown towards relay_backoff_max."""
    lease, grace = 1.0, 0.1
    quick = RunStore(store.url, relay_grace=grace, relay_backoff_max=CAP)
    try:
        _scheduled_wait(quick)
        publisher = RecordingPublisher()
        alive_until = time.monotonic() + 3 * lease
        while time.monotonic() < alive_until:  # alive: its back-off would have grown past 1.6 s by now
            quick.renew_holder_lease(HOLDER, lease)
            relay_outbox(quick, publisher, holder_backoff=lease)
            time.sleep(0.05)
        died = time.monotonic()
        assert publisher.sent and all(ref.queue == HOLDER_QUEUE for ref in publisher.sent)

        while not any(ref.queue == "" for ref in publisher.sent):
            assert time.monotonic() - died < 3 * lease, "the wait stayed in the dead holder's queue"
            relay_outbox(quick, publisher, holder_backoff=lease)
            time.sleep(0.05)
    finally:
        quick.close()


def test_a_running_wait_whose_worker_on_another_host_died_is_re_dispatched_to_lg_sandbox(store):
    """The worker holding the program ran its wait and died: the step's lease and its holder lease both run
    out, and the lease sweeper's re-send goes to any sandbox worker."""
    _scheduled_wait(store)
    assert store.claim_step("r1", WAIT_KEY, HOLDER, lease_seconds=0.05) == 1
    _expired_lease(store)
    publisher = RecordingPublisher()

    assert sweep_leases(store, publisher, hold_off=LEASE) == 1

    assert [ref.queue for ref in publisher.sent] == [""]


def test_a_running_wait_whose_worker_keeps_its_holder_lease_is_re_dispatched_to_its_queue(store):
    """Its step lease ran out (a claim left behind), but the process lives: the re-send goes to it."""
    _scheduled_wait(store)
    assert store.claim_step("r1", WAIT_KEY, HOLDER, lease_seconds=0.05) == 1
    store.renew_holder_lease(HOLDER, 60)
    time.sleep(0.1)
    publisher = RecordingPublisher()

    assert sweep_leases(store, publisher, hold_off=LEASE) == 1

    assert [ref.queue for ref in publisher.sent] == [HOLDER_QUEUE]


def test_holder_leases_that_cannot_be_read_leave_the_wait_on_its_queue_and_the_other_steps_sent(store, monkeypatch):
    """The relay has already pushed the steps it took, so they go out this pass: the holder presumed alive."""
    _scheduled_wait(store)
    create_distributed_run(store, "r2")
    make_due(store, "r2")
    make_due(store, key=WAIT_KEY)

    def unreachable(_holders):
        raise ConnectionError("the store went away")

    monkeypatch.setattr(store, "holder_leases", unreachable)
    publisher = RecordingPublisher()

    assert relay_outbox(store, publisher, holder_backoff=LEASE) == 2
    assert sorted(ref.queue for ref in publisher.sent) == ["", HOLDER_QUEUE]
