"""A worker that lost its claim stops working on the step.

A slow but alive worker can lose its claim: its heartbeat missed a lease (a
database hiccup on its connection, a long pause), the sweeper re-dispatched the
step and another worker claimed it. The first worker's commit is refused (it no
longer holds the step), but until then it went on streaming the model's answer
into the run's live stream, interleaved with the new attempt's deltas after its
``model_retry``: a client following the run assembled text from two attempts.
Its heartbeat learns the claim is gone at its next beat; the step stops there.
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from lg_core import Agent, Configuration, with_configuration
from lg_core.providers import scripted

# 10 s of answer: the takeover and the stop must come before its end, which 2 s left to a
# loaded machine's scheduling; a passing test stops it within a lease of the takeover.
WORDS = 200
scripted.register("lost-claim", [{"text": " ".join(f"w{i}" for i in range(WORDS)), "delta_delay": 0.05}])
LEASE = 0.3


class StreamAgent(Agent):
    model = "scripted:lost-claim"


class Recorder:
    """An event sink that keeps the text deltas the worker published."""

    def __init__(self):
        self.deltas: list[str] = []

    def publish(self, _run_id, event):
        if event.type == "text_delta":
            self.deltas.append(event.data.get("text", ""))

    def publish_many(self, run_id, events):
        for event in events:
            self.publish(run_id, event)


def _wait_until(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)





@pytest.mark.parametrize(
    "new_holder",
    [
        "'another-host:4242:1'",  # a worker on another host claimed it
        "holder",  # another thread of this same process did (one holder string per process)
    ],
)
def test_a_worker_that_lost_its_claim_stops_streaming(tmp_path, new_holder):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    client_config = Configuration(run_store=url)
    worker_config = Configuration(run_store=url, lease_seconds=LEASE)
    client, worker = client_config.runtime(), worker_config.runtime()
    recorder = Recorder()
    worker.engine.add_sink(recorder)
    try:
        with with_configuration(client_config):
            (ref,) = client.begin(StreamAgent.build_run("go"), distributed=True)
        outcome: list[str] = []

        def execute() -> None:
            with with_configuration(worker_config):
                outcome.append(worker.engine.execute_claimed(ref.run_id, ref.key)[0])

        thread = threading.Thread(target=execute)
        thread.start()
        _wait_until(lambda: recorder.deltas)
        # Another worker took the step over (the sweeper re-dispatched it after a missed lease).
        with client.store.db.engine.begin() as connection:
            connection.execute(
                text(f"update lg_steps set holder = {new_holder}, lease_until = :until, attempts = attempts + 1 "
                     "where run_id = :run_id and key = :key"),
                {"until": time.time() + 300, "run_id": ref.run_id, "key": ref.key},
            )
        thread.join(timeout=60)

        assert outcome == ["lost"]
        assert f"w{WORDS - 1}" not in "".join(recorder.deltas), "the worker streamed the whole answer of a step it no longer held"
        step = client.store.load_step(ref.run_id, ref.key)
        assert (step.status, step.attempts) == ("running", 2)  # the new attempt's, untouched
    finally:
        client_config.close()
        worker_config.close()


def test_a_worker_whose_lease_ran_out_unrenewed_streams_nothing_once_another_holds_the_step(tmp_path, monkeypatch):
    """The heartbeat cannot renew (the worker's database connection hangs), the lease runs out,
    another worker claims the step; then the first one's database is back. Not one delta of
    the superseded attempt may follow the new claim: the step stops once its lease may have
    ended, unless it confirms it still holds the step."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    client_config = Configuration(run_store=url)
    worker_config = Configuration(run_store=url, lease_seconds=LEASE)
    client, worker = client_config.runtime(), worker_config.runtime()
    recorder = Recorder()
    worker.engine.add_sink(recorder)
    try:
        with with_configuration(client_config):
            (ref,) = client.begin(StreamAgent.build_run("go"), distributed=True)
        outcome: list[str] = []

        def execute() -> None:
            with with_configuration(worker_config):
                outcome.append(worker.engine.execute_claimed(ref.run_id, ref.key)[0])

        def unreachable(*_args, **_kwargs):
            raise ConnectionError("the database is unreachable")

        thread = threading.Thread(target=execute)
        thread.start()
        _wait_until(lambda: recorder.deltas)
        monkeypatch.setattr(worker.store, "renew_leases", unreachable)
        monkeypatch.setattr(worker.store, "renew_leases_once", unreachable)
        _wait_until(lambda: client.store.load_step(ref.run_id, ref.key).lease_until < client.store.clock())
        assert client.store.claim_step(ref.run_id, ref.key, "another-host:4242:1", lease_seconds=300) == 2
        streamed_before_takeover = len(recorder.deltas)
        monkeypatch.undo()  # the worker's database is back
        thread.join(timeout=60)

        assert outcome == ["lost"]
        assert recorder.deltas[streamed_before_takeover:] == [], "the superseded attempt streamed after another worker claimed its step"
    finally:
        client_config.close()
        worker_config.close()


def _refused(*_args, **_kwargs):
    """What psycopg raises while the run store's server is down or restarting (a transient error)."""
    raise OperationalError("UPDATE lg_steps", {}, Exception('connection to server at "127.0.0.1" failed: Connection refused'))


def _streaming_worker(tmp_path, **settings):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    client_config = Configuration(run_store=url)
    worker_config = Configuration(run_store=url, lease_seconds=LEASE, **settings)
    return client_config, worker_config


def test_a_step_whose_lease_ran_out_while_the_store_was_down_waits_and_goes_on_once_it_confirms(tmp_path, monkeypatch):
    """The store cannot be reached for several leases (a database restart): the step cannot confirm
    its claim, so it streams nothing more, waits, and goes on once a renewal says it still holds the
    step. It used to stop there, abandoning a model turn that was fine."""
    client_config, worker_config = _streaming_worker(tmp_path)
    client, worker = client_config.runtime(), worker_config.runtime()
    recorder = Recorder()
    worker.engine.add_sink(recorder)
    try:
        with with_configuration(client_config):
            (ref,) = client.begin(StreamAgent.build_run("go"), distributed=True)
        outcome: list[str] = []

        def execute() -> None:
            with with_configuration(worker_config):
                outcome.append(worker.engine.execute_claimed(ref.run_id, ref.key)[0])

        thread = threading.Thread(target=execute)
        thread.start()
        _wait_until(lambda: recorder.deltas)
        monkeypatch.setattr(worker.store, "renew_leases", _refused)
        monkeypatch.setattr(worker.store, "renew_leases_once", _refused)
        _wait_until(lambda: client.store.load_step(ref.run_id, ref.key).lease_until < client.store.clock())
        time.sleep(5 * LEASE)
        paused_at = len(recorder.deltas)
        time.sleep(5 * LEASE)
        assert len(recorder.deltas) == paused_at, "the step streamed on without confirming its claim"
        monkeypatch.undo()  # the store is back
        thread.join(timeout=60)

        assert outcome == ["executed"]
        assert "".join(recorder.deltas).split() == [f"w{i}" for i in range(WORDS)]
        step = client.store.load_step(ref.run_id, ref.key)
        assert (step.status, step.attempts) == ("succeeded", 1)
    finally:
        client_config.close()
        worker_config.close()


def test_a_step_that_waited_for_the_store_stops_if_another_worker_claimed_it_meanwhile(tmp_path, monkeypatch):
    """Only this worker lost the store (a partition): another claims the step after the lease ran
    out. Once this worker's renewal gets through it learns that and stops, and not one delta of its
    attempt follows the new claim."""
    client_config, worker_config = _streaming_worker(tmp_path)
    client, worker = client_config.runtime(), worker_config.runtime()
    recorder = Recorder()
    worker.engine.add_sink(recorder)
    try:
        with with_configuration(client_config):
            (ref,) = client.begin(StreamAgent.build_run("go"), distributed=True)
        outcome: list[str] = []

        def execute() -> None:
            with with_configuration(worker_config):
                outcome.append(worker.engine.execute_claimed(ref.run_id, ref.key)[0])

        thread = threading.Thread(target=execute)
        thread.start()
        _wait_until(lambda: recorder.deltas)
        monkeypatch.setattr(worker.store, "renew_leases", _refused)
        monkeypatch.setattr(worker.store, "renew_leases_once", _refused)
        _wait_until(lambda: client.store.load_step(ref.run_id, ref.key).lease_until < client.store.clock())
        assert client.store.claim_step(ref.run_id, ref.key, "another-host:4242:1", lease_seconds=300) == 2
        streamed_before_takeover = len(recorder.deltas)
        monkeypatch.undo()
        thread.join(timeout=60)

        assert outcome == ["lost"]
        assert recorder.deltas[streamed_before_takeover:] == [], "the superseded attempt streamed after another worker claimed its step"
    finally:
        client_config.close()
        worker_config.close()


def test_without_patience_a_step_that_cannot_confirm_its_claim_stops(tmp_path, monkeypatch):
    client_config, worker_config = _streaming_worker(tmp_path, store_outage_patience=0)
    client, worker = client_config.runtime(), worker_config.runtime()
    recorder = Recorder()
    worker.engine.add_sink(recorder)
    try:
        with with_configuration(client_config):
            (ref,) = client.begin(StreamAgent.build_run("go"), distributed=True)
        outcome: list[str] = []

        def execute() -> None:
            with with_configuration(worker_config):
                outcome.append(worker.engine.execute_claimed(ref.run_id, ref.key)[0])

        thread = threading.Thread(target=execute)
        thread.start()
        _wait_until(lambda: recorder.deltas)
        monkeypatch.setattr(worker.store, "renew_leases", _refused)
        monkeypatch.setattr(worker.store, "renew_leases_once", _refused)
        thread.join(timeout=60)

        assert outcome == ["lost"]
        assert f"w{WORDS - 1}" not in "".join(recorder.deltas)
    finally:
        client_config.close()
        worker_config.close()
