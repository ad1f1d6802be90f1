"""Leases and due times are written and judged by the store's clock: PostgreSQL's, whatever the hosts' say.

Each "host" here is this process with ``time.time`` shifted by five minutes
while it calls the store, as a worker or a scheduler on a host whose clock
runs behind or ahead would. On PostgreSQL a lease written behind is not taken
by a claim or a sweep ahead, and a lease written ahead is not kept past its
expiry by a host behind (lg_core.store._clock). A SQLite store is on one host
and keeps that host's clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from lg_core.store import RunStore
from lg_scheduler.recovery import sweep_leases
from tests.store.outbox_steps import MODEL_KEY as KEY
from tests.store.outbox_steps import create_distributed_run

BEHIND, AHEAD = -300.0, 300.0
_real_time = time.time


@pytest.fixture
def host(monkeypatch) -> Callable[[float], AbstractContextManager[None]]:
    """``with host(skew):`` runs the block on a host whose clock is ``skew`` seconds off."""

    @contextmanager
    def skewed(skew: float) -> Iterator[None]:
        with monkeypatch.context() as patch:
            patch.setattr(time, "time", lambda: _real_time() + skew)
            yield

    return skewed


@pytest.fixture
def pg_store(pg_url) -> Iterator[RunStore]:
    store = RunStore(pg_url)
    yield store
    store.close()


class Publisher:
    def __init__(self) -> None:
        self.sent: list[object] = []

    def publish(self, refs) -> None:
        self.sent.extend(refs)

    def advance(self, run_id: str) -> None:
        self.sent.append(run_id)


def _wait_past(store: RunStore, moment: float) -> None:
    """Wait until the store's clock has passed ``moment``."""
    deadline = time.monotonic() + 30
    while store.clock() <= moment:
        assert time.monotonic() < deadline, "the store's clock did not pass the moment"
        time.sleep(0.05)


def test_the_store_clock_is_the_servers_whatever_the_host_says(pg_store, host):
    with host(AHEAD):
        assert abs(pg_store.clock() - _real_time()) < 60  # the server runs on this machine, unskewed
    with host(BEHIND):
        assert abs(pg_store.clock() - _real_time()) < 60


def test_a_lease_written_by_a_host_behind_is_not_taken_by_a_host_ahead(pg_store, host):
    create_distributed_run(pg_store)
    with host(BEHIND):
        assert pg_store.claim_step("r1", KEY, "behind:1:1", lease_seconds=30) == 1
    with host(AHEAD):
        assert sweep_leases(pg_store, Publisher(), hold_off=1, local_liveness=False) == 0
        assert pg_store.claim_step("r1", KEY, "ahead:2:1", lease_seconds=30) is None
        assert pg_store.claim_and_load("r1", KEY, "ahead:2:1", 30).attempts is None

    step = pg_store.load_step("r1", KEY)
    assert (step.holder, step.attempts) == ("behind:1:1", 1)
    assert pg_store.clock() < step.lease_until <= pg_store.clock() + 30  # 30 s from now by the server


def test_a_renewal_by_a_host_behind_extends_the_lease_by_the_servers_clock(pg_store, host):
    create_distributed_run(pg_store)
    with host(BEHIND):
        pg_store.claim_and_load("r1", KEY, "behind:1:1", 60)
        pg_store.renew_leases("behind:1:1", 120, [("r1", KEY)])
    with host(AHEAD):
        assert pg_store.claim_step("r1", KEY, "ahead:2:1", lease_seconds=30) is None
    lease = pg_store.load_step("r1", KEY).lease_until
    assert pg_store.clock() + 60 < lease <= pg_store.clock() + 120


def test_a_lease_written_by_a_host_ahead_is_taken_over_once_it_expires(pg_store, host):
    create_distributed_run(pg_store)
    with host(AHEAD):
        assert pg_store.claim_step("r1", KEY, "ahead:1:1", lease_seconds=0.2) == 1
    _wait_past(pg_store, pg_store.load_step("r1", KEY).lease_until)  # the holder died: nothing renews it

    with host(BEHIND):
        publisher = Publisher()
        assert sweep_leases(pg_store, publisher, hold_off=1, local_liveness=False) == 1
        assert [ref.key for ref in publisher.sent] == [KEY]
        assert pg_store.claim_step("r1", KEY, "behind:2:1", lease_seconds=30) == 2


def test_a_run_once_claim_is_judged_by_the_servers_clock(pg_store, host):
    create_distributed_run(pg_store)
    with host(BEHIND):
        assert pg_store.claim_once("r1", "once/charge", "behind:1:1", 30).state == "claimed"
    with host(AHEAD):
        held = pg_store.claim_once("r1", "once/charge", "ahead:2:1", 30)
        assert (held.state, held.holder, held.expired) == ("held", "behind:1:1", False)
        assert pg_store.look_once("r1", "once/charge").expired is False
        assert not pg_store.drop_once("r1", "once/charge", "behind:1:1", expired_only=True)
    assert pg_store.load_step("r1", "once/charge").holder == "behind:1:1"

    with host(AHEAD):
        claimed = pg_store.claim_once("r1", "once/email", "ahead:2:1", 0.2)
    _wait_past(pg_store, claimed.lease_until)
    with host(BEHIND):
        assert pg_store.look_once("r1", "once/email").expired is True
        assert pg_store.drop_once("r1", "once/email", "ahead:2:1", expired_only=True)
        assert pg_store.claim_once("r1", "once/email", "behind:1:1", 30).state == "claimed"


def test_the_relay_judges_due_steps_by_the_servers_clock(pg_url, host):
    store = RunStore(pg_url, relay_grace=30)
    try:
        with host(BEHIND):
            create_distributed_run(store, "r1")  # its first step is due for the relay 30 s from now, by the server
        with host(AHEAD):
            assert store.relay_due_steps() == []
    finally:
        store.close()

    store = RunStore(pg_url, relay_grace=0.2)
    try:
        with host(AHEAD):
            create_distributed_run(store, "r2")
        _wait_past(store, store.clock() + 0.2)  # its step was due 0.2 s after it was created
        with host(BEHIND):
            assert [(r.step.run_id, r.step.key) for r in store.relay_due_steps()] == [("r2", KEY)]
            assert store.relay_due_steps() == []  # pushed a grace ahead
    finally:
        store.close()


def test_a_failed_attempt_is_due_after_its_delay_by_the_servers_clock(pg_url, host):
    store = RunStore(pg_url, relay_grace=0.1)
    try:
        create_distributed_run(store)
        with host(BEHIND):
            store.claim_step("r1", KEY, "behind:1:1", lease_seconds=30)
            assert store.release_failed_step("r1", KEY, "behind:1:1", {"name": "RuntimeError"}, delay=30)
        with host(AHEAD):
            assert store.relay_due_steps() == []  # due in 30 s, not 5 minutes ago
        assert store.load_step("r1", KEY).status == "scheduled"
    finally:
        store.close()


def test_a_deadline_is_judged_by_the_servers_clock(pg_store, host):
    create_distributed_run(pg_store, deadline_at=_real_time() + 60)
    with host(AHEAD):
        assert pg_store.runs_to_end() == []
    with host(BEHIND):
        assert pg_store.runs_to_end() == []


def test_a_sqlite_store_keeps_its_hosts_clock(tmp_path, host):
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        create_distributed_run(store)
        with host(AHEAD):
            before = time.time()
            assert store.claim_step("r1", KEY, "host:1:1", lease_seconds=30) == 1
            after = time.time()
            assert before <= store.clock() <= time.time()
        lease = store.load_step("r1", KEY).lease_until
        assert before + 30 <= lease <= after + 30  # five minutes ahead of the real time, as its host says
    finally:
        store.close()


@pytest.mark.parametrize("store_kind", ["sqlite", "postgresql"])
def test_a_renewal_names_the_claims_it_no_longer_holds(pg_store, tmp_path, store_kind):
    """The heartbeat learns from its renewal which attempts were taken over (lg_core.engine.leases)."""
    store = pg_store if store_kind == "postgresql" else RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    create_distributed_run(store)
    assert store.claim_step("r1", KEY, "me:1:1", lease_seconds=60) == 1
    assert store.renew_leases("me:1:1", 60, [("r1", KEY, 1), ("r1", KEY)]) == []
    assert store.renew_leases("me:1:1", 60, [("r1", KEY, 2)]) == [("r1", KEY, 2)]  # not the attempt it holds
    assert store.renew_leases("other:2:1", 60, [("r1", KEY, 1)]) == [("r1", KEY, 1)]  # not the holder
