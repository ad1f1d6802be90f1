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


class StreamingStep:
    """A distributed run whose model turn streams on a thread of this process, as a worker runs it.

    ``client`` and ``worker`` are two runtimes on one SQLite file; the worker's
    lease is LEASE. ``cut_renewals`` makes the worker's lease renewals fail
    (the database out of reach for it), ``restore`` brings them back.
    """

    def __init__(self, tmp_path, monkeypatch, **settings) -> None:
        url = f"sqlite:///{tmp_path / 'runs.db'}"
        self.monkeypatch = monkeypatch
        self.client_config = Configuration(run_store=url)
        self.worker_config = Configuration(run_store=url, lease_seconds=LEASE, **settings)
        self.client, self.worker = self.client_config.runtime(), self.worker_config.runtime()
        self.recorder = Recorder()
        self.worker.engine.add_sink(self.recorder)
        with with_configuration(self.client_config):
            (self.ref,) = self.client.begin(StreamAgent.build_run("go"), distributed=True)
        self.outcome: list[str] = []
        self.thread = threading.Thread(target=self._execute)
        self.thread.start()
        _wait_until(lambda: self.recorder.deltas)

    def _execute(self) -> None:
        with with_configuration(self.worker_config):
            self.outcome.append(self.worker.engine.execute_claimed(self.ref.run_id, self.ref.key)[0])

    def step(self):
        return self.client.store.load_step(self.ref.run_id, self.ref.key)

    def cut_renewals(self, failing) -> None:
        self.monkeypatch.setattr(self.worker.store, "renew_leases", failing)
        self.monkeypatch.setattr(self.worker.store, "renew_leases_once", failing)

    def restore(self) -> None:
        self.monkeypatch.undo()

    def wait_lease_out(self) -> None:
        _wait_until(lambda: self.step().lease_until < self.client.store.clock())

    def take_over(self) -> int:
        """Another worker claims the step (after its lease ran out); returns the deltas streamed so far."""
        assert (
            self.client.store.claim_step(self.ref.run_id, self.ref.key, "another-host:4242:1", lease_seconds=300) == 2
        )
        return len(self.recorder.deltas)

    def finish(self) -> str:
        self.thread.join(timeout=60)
        [outcome] = self.outcome
        return outcome

    def close(self) -> None:
        self.thread.join(timeout=60)
        self.client_config.close()
        self.worker_config.close()


@pytest.fixture
def streaming(tmp_path, monkeypatch):
    started: list[StreamingStep] = []

    def start(**settings) -> StreamingStep:
        started.append(StreamingStep(tmp_path, monkeypatch, **settings))
        return started[-1]

    yield start
    for step in started:
        step.close()


def _unreachable(*_args, **_kwargs):
    """The worker's database connection hangs up: not an error the store knows as transient."""
    raise ConnectionError("the database is unreachable")


def _refused(*_args, **_kwargs):
    """What psycopg raises while the run store's server is down or restarting (a transient error)."""
    raise OperationalError(
        "UPDATE lg_steps", {}, Exception('connection to server at "127.0.0.1" failed: Connection refused')
    )


@pytest.mark.parametrize(
    "new_holder",
    [
        "'another-host:4242:1'",  # a worker on another host claimed it
        "holder",  # another thread of this same process did (one holder string per process)
    ],
)
def test_a_worker_that_lost_its_claim_stops_streaming(streaming, new_holder):
    run = streaming()
    # Another worker took the step over (the sweeper re-dispatched it after a missed lease).
    with run.client.store.db.engine.begin() as connection:
        connection.execute(
            text(
                f"update lg_steps set holder = {new_holder}, lease_until = :until, attempts = attempts + 1 "
                "where run_id = :run_id and key = :key"
            ),
            {"until": time.time() + 300, "run_id": run.ref.run_id, "key": run.ref.key},
        )

    assert run.finish() == "lost"
    assert f"w{WORDS - 1}" not in "".join(run.recorder.deltas), (
        "the worker streamed the whole answer of a step it no longer held"
    )
    assert (run.step().status, run.step().attempts) == ("running", 2)  # the new attempt's, untouched


@pytest.mark.parametrize("failing", [_unreachable, _refused])
def test_a_worker_whose_lease_ran_out_unrenewed_streams_nothing_once_another_holds_the_step(streaming, failing):
    """The heartbeat cannot renew (the worker's database connection hangs, or its server refuses
    connections), the lease runs out, another worker claims the step; then the first one's database
    is back. Not one delta of the superseded attempt may follow the new claim: the step stops once
    its lease may have ended, or pauses while the store cannot answer, until it confirms it still
    holds the step; here it learns it does not."""
    run = streaming()
    run.cut_renewals(failing)
    run.wait_lease_out()
    streamed_before_takeover = run.take_over()
    run.restore()  # the worker's database is back

    assert run.finish() == "lost"
    assert run.recorder.deltas[streamed_before_takeover:] == [], (
        "the superseded attempt streamed after another worker claimed its step"
    )


def test_a_step_whose_lease_ran_out_while_the_store_was_down_waits_and_goes_on_once_it_confirms(streaming):
    """The store cannot be reached for several leases (a database restart): the step cannot confirm
    its claim, so it streams nothing more, waits, and goes on once a renewal says it still holds the
    step, rather than abandoning a model turn that is fine."""
    run = streaming()
    run.cut_renewals(_refused)
    run.wait_lease_out()
    time.sleep(5 * LEASE)
    paused_at = len(run.recorder.deltas)
    time.sleep(5 * LEASE)
    assert len(run.recorder.deltas) == paused_at, "the step streamed on without confirming its claim"
    run.restore()  # the store is back

    assert run.finish() == "executed"
    assert "".join(run.recorder.deltas).split() == [f"w{i}" for i in range(WORDS)]
    assert (run.step().status, run.step().attempts) == ("succeeded", 1)


def test_without_patience_a_step_that_cannot_confirm_its_claim_stops(streaming):
    run = streaming(store_outage_patience=0)
    run.cut_renewals(_refused)

    assert run.finish() == "lost"
    assert f"w{WORDS - 1}" not in "".join(run.recorder.deltas)
