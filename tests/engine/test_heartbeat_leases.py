"""A claimed step its process no longer executes keeps its lease while the process is busy.

Heartbeat renews *every* running step held by this process (renew_leases by
holder), not the steps it executes. A step left claimed but not executing
(its attempt failed while the database was down, so _release_failed could not
give it back, "the lease brings the step back") is renewed for as long as the
worker executes anything else: the sweeper never sees its lease expire, the
holder is alive, and the run stays running with nothing working on the step.
"""

from __future__ import annotations

import time

import pytest

from lg_core import Agent, Configuration, with_configuration
from lg_core.providers import scripted
from lg_scheduler.recovery import sweep_leases
from tests.engine.numbered_tool import NumberedTool, RecordingPublisher, numbered_calls

scripted.register("orphan-lease", numbered_calls(1, 2))
LEASE = 0.3


class EchoAgent(Agent):
    model = "scripted:orphan-lease"
    tools = [NumberedTool]


def test_a_step_left_claimed_after_a_failed_release_is_swept_once_its_lease_expires(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    client_config = Configuration(run_store=url)
    worker_config = Configuration(run_store=url, lease_seconds=LEASE)
    client, worker = client_config.runtime(), worker_config.runtime()
    try:
        with with_configuration(client_config):
            (ref,) = client.begin(EchoAgent.build_run("go"), distributed=True)

        def database_down(*_a, **_k):
            raise ConnectionError("the database is unreachable")

        # The attempt's commit fails, and so does giving the step back (the database is down).
        monkeypatch.setattr(worker.store, "commit", database_down)
        monkeypatch.setattr(worker.store, "release_failed_step", database_down)
        with with_configuration(worker_config), pytest.raises(ConnectionError):
            worker.engine.execute_claimed(ref.run_id, ref.key)
        monkeypatch.undo()  # the database is back

        # The worker goes on executing other steps (here: one long one) for a few leases.
        with worker.engine.heartbeat.holding("another-run", "root/turn-0/model"):
            time.sleep(4 * LEASE)
            publisher = RecordingPublisher()
            swept = sweep_leases(client.store, publisher, hold_off=LEASE)
            step = client.store.load_step(ref.run_id, ref.key)

        assert step.status == "running"
        assert swept == 1, (
            f"the orphaned step was not re-dispatched: its lease runs {step.lease_until - time.time():+.2f} s "
            f"from now although nothing executed it for {4 * LEASE:.1f} s"
        )
    finally:
        client_config.close()
        worker_config.close()


def test_the_step_being_executed_keeps_its_lease(tmp_path):
    """Renewed past the claim's own lease, and the sweeper leaves it.

    Waiting for the renewal rather than sleeping a few leases and then looking: a
    look after a sleep found the lease expired whenever the heartbeat had just
    stalled for two thirds of a lease (0.2 s of LEASE, on a loaded machine). Right
    after a renewal, the sweep finds it expired only if this thread stalls for
    the whole lease.
    """
    from lg_core.lease_holders import current_holder

    lease = 1.5
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    config = Configuration(run_store=url, lease_seconds=lease)
    runtime = config.runtime()
    try:
        with with_configuration(config):
            (ref,) = runtime.begin(EchoAgent.build_run("go"), distributed=True)
        assert runtime.store.claim_step(ref.run_id, ref.key, current_holder(), lease) == 1
        claimed_until = runtime.store.load_step(ref.run_id, ref.key).lease_until
        with runtime.engine.heartbeat.holding(ref.run_id, ref.key):
            renewed = wait_for_lease(runtime.store, ref, lambda until: until > claimed_until + lease)
            assert renewed, "the heartbeat did not renew the executing step's lease past its claim's"
            assert sweep_leases(runtime.store, RecordingPublisher(), hold_off=lease) == 0
    finally:
        config.close()


def wait_for_lease(store, ref, condition, timeout: float = 30) -> bool:
    """Poll the step's lease until ``condition(lease_until)`` holds; False after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition(store.load_step(ref.run_id, ref.key).lease_until):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_closing_the_runtime_stops_the_threads_that_use_its_store(tmp_path):
    """A heartbeat or cancel poll still running a statement when the store closes its SQLite
    connections can crash the process (it did, now and then, at the end of the test above)."""
    from lg_core.cancellation import CancellationToken

    config = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}", lease_seconds=LEASE)
    engine = config.runtime().engine
    with (
        engine.heartbeat.holding("run-1", "root/turn-0/model"),
        engine.cancel_watch.watching("run-1", CancellationToken()),
    ):
        time.sleep(LEASE)  # both threads poll the store meanwhile
    threads = [engine.heartbeat._thread, engine.cancel_watch._thread]
    assert all(thread is not None and thread.is_alive() for thread in threads)

    config.close()

    assert not any(thread.is_alive() for thread in threads)
