"""A process's holder lease: renewed while it holds code-mode programs, judged by the store's clock.

Runs on an in-memory SQLite store and on PostgreSQL. The lease is what a
scheduler on another host reads to tell that the process a ``wait`` was sent
to is gone, so it must run ahead while renewed, run out when renewals stop,
and vanish when its process holds no program any more.
"""

from __future__ import annotations

import time

import pytest

from lg_core.engine.leases import Heartbeat
from lg_core.lease_holders import current_holder
from lg_core.store import RunStore

HOLDER = "another-host:4242:1"


@pytest.fixture(params=["memory", "postgres"])
def store(request):
    url = "sqlite://" if request.param == "memory" else request.getfixturevalue("pg_url")
    opened = RunStore(url)
    yield opened
    opened.close()


def test_a_holder_without_a_lease_is_not_listed(store):
    assert store.holder_leases([HOLDER]) == {}
    assert store.holder_leases([]) == {}


def test_a_renewal_writes_the_lease_ahead_of_the_store_clock_and_a_later_one_extends_it(store):
    before = store.clock()
    store.renew_holder_lease(HOLDER, 30)
    first = store.holder_leases([HOLDER, "other-host:1:1"])
    assert set(first) == {HOLDER}
    assert before + 30 - 0.5 <= first[HOLDER] <= store.clock() + 30 + 0.5

    time.sleep(0.05)
    store.renew_holder_lease(HOLDER, 30)

    assert store.holder_leases([HOLDER])[HOLDER] > first[HOLDER]


def test_a_lease_no_renewal_extends_runs_out_by_the_store_clock(store):
    store.renew_holder_lease(HOLDER, 0.2)
    assert store.holder_leases([HOLDER])[HOLDER] > store.clock()

    time.sleep(0.4)

    assert store.holder_leases([HOLDER])[HOLDER] < store.clock()
    store.renew_holder_lease(HOLDER, 30)  # renewed again: held again
    assert store.holder_leases([HOLDER])[HOLDER] > store.clock()


def test_a_dropped_lease_is_gone_and_leases_are_per_holder(store):
    store.renew_holder_lease(HOLDER, 30)
    store.renew_holder_lease("other-host:1:1", 30)

    store.drop_holder_lease(HOLDER)

    assert set(store.holder_leases([HOLDER, "other-host:1:1"])) == {"other-host:1:1"}


def test_the_heartbeat_renews_the_holder_lease_only_while_the_process_holds_programs(store):
    heartbeat = Heartbeat(store, lease_seconds=0.3, patience=1.0)
    holds = [True]
    try:
        heartbeat.keep_holder_lease(lambda: holds[0])
        assert current_holder() in store.holder_leases([current_holder()]), "written before the step commits"

        time.sleep(0.8)  # past two leases: only the beat keeps it ahead
        assert store.holder_leases([current_holder()])[current_holder()] > store.clock()

        holds[0] = False
        deadline = time.monotonic() + 5
        while store.holder_leases([current_holder()]):
            assert time.monotonic() < deadline, "the lease of a process holding no program was not dropped"
            time.sleep(0.05)
        time.sleep(0.3)
        assert store.holder_leases([current_holder()]) == {}, "nothing is written while no program is held"
    finally:
        heartbeat.stop()


def test_a_heartbeat_that_only_executes_steps_writes_no_holder_lease(store):
    heartbeat = Heartbeat(store, lease_seconds=0.15, patience=1.0)
    try:
        with heartbeat.holding("r1", "root/turn-0/model"):
            time.sleep(0.3)
    finally:
        heartbeat.stop()

    assert store.holder_leases([current_holder()]) == {}


def test_leases_that_ran_out_long_ago_are_dropped_and_the_others_kept(store):
    store.renew_holder_lease("dead-host:1:1", -3600)  # ran out an hour ago
    store.renew_holder_lease("gone-host:2:1", -1)
    store.renew_holder_lease(HOLDER, 30)

    assert store.drop_stale_holder_leases(600) == 1

    assert set(store.holder_leases(["dead-host:1:1", "gone-host:2:1", HOLDER])) == {"gone-host:2:1", HOLDER}
