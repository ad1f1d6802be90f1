"""A threads-pool task hands its commit's events and successors to the event sender.

``RedisEventSink.deferring`` queues a commit's events instead of waiting for
Redis, and ``then`` runs a callback (the successors' publish) once every event
queued before it is in Redis, so a step's successor never leaves before the
step's events. Against the real redis-server; a gate holds the sender's round
trips so that "not yet sent" is a state the test can look at, not a race.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import redis

from lg_core.events import StreamEvent
from lg_workers import runtime as worker_runtime_module
from lg_workers.streams import RedisEventSink, connect, stream_key


class GatedClient:
    """A real client whose pipelines wait for ``gate`` before they execute."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.gate = threading.Event()

    def pipeline(self, **options: object) -> object:
        pipe = self.client.pipeline(**options)
        execute = pipe.execute

        def gated(*args, **kwargs):
            assert self.gate.wait(10), "the test never opened the gate"
            return execute(*args, **kwargs)

        pipe.execute = gated
        return pipe


@pytest.fixture
def client(redis_server):
    client = connect(redis_server.url)
    client.flushdb()
    yield client
    client.close()


def durable(run_id: str, seq: int) -> StreamEvent:
    return StreamEvent.build("message_stop", text=f"step {seq}").with_seq(seq)


def test_deferred_events_are_queued_and_the_callback_runs_after_them(client):
    gated = GatedClient(client)
    sink = RedisEventSink(gated)  # type: ignore[arg-type]
    seen_by_callback: list[int] = []
    done = threading.Event()

    def publish_successor() -> None:
        seen_by_callback.append(client.xlen(stream_key("run-1")))
        done.set()

    with sink.deferring():
        sink.publish_many("run-1", [durable("run-1", 1), durable("run-1", 2)])  # returns with the gate shut
        sink.publish("run-1", durable("run-1", 3))
    sink.then(publish_successor)

    assert client.xlen(stream_key("run-1")) == 0 and not done.is_set()
    gated.gate.set()
    assert done.wait(10)
    assert seen_by_callback == [3]  # every event queued before the callback was in Redis first
    assert sink.drain(10)


def test_outside_deferring_a_durable_publish_still_waits_for_redis(client):
    sink = RedisEventSink(client)

    with sink.deferring():
        pass
    sink.publish_many("run-2", [durable("run-2", 1)])

    assert client.xlen(stream_key("run-2")) == 1  # sent before publish_many returned


def test_deferring_is_per_thread(client):
    gated = GatedClient(client)
    sink = RedisEventSink(gated)  # type: ignore[arg-type]
    returned = threading.Event()

    def other_thread() -> None:
        sink.publish_many("run-3", [durable("run-3", 1)])  # not deferring: waits for the gate
        returned.set()

    with sink.deferring():
        thread = threading.Thread(target=other_thread)
        thread.start()
        assert not returned.wait(0.3)
    gated.gate.set()
    thread.join(10)
    assert returned.is_set() and client.xlen(stream_key("run-3")) == 1


def test_a_failing_callback_does_not_stop_the_sender(client):
    sink = RedisEventSink(client)

    def broken() -> None:
        raise RuntimeError("broker gone")

    with sink.deferring():
        sink.publish_many("run-4", [durable("run-4", 1)])
    sink.then(broken)
    with sink.deferring():
        sink.publish_many("run-4", [durable("run-4", 2)])

    assert sink.drain(10)
    assert client.xlen(stream_key("run-4")) == 2


def test_drain_reports_what_could_not_be_sent_in_time(client):
    gated = GatedClient(client)
    sink = RedisEventSink(gated)  # type: ignore[arg-type]
    with sink.deferring():
        sink.publish_many("run-5", [durable("run-5", 1)])

    assert sink.drain(0.2) is False
    gated.gate.set()
    assert sink.drain(10) is True
    assert client.xlen(stream_key("run-5")) == 1


@pytest.mark.parametrize(("pool", "hands_off"), [("threads", True), ("prefork", False), ("solo", False)])
def test_only_a_threads_pool_hands_off(pool, hands_off, monkeypatch):
    monkeypatch.setattr(worker_runtime_module, "_on_thread_pool", False)

    worker_runtime_module._note_pool(sender=SimpleNamespace(pool_cls=pool))

    assert worker_runtime_module.hands_off_publishing() is hands_off


def test_a_clean_shutdown_publishes_the_steps_handed_off_before_it(dist):
    from lg_core.engine.dispatcher import StepRef

    backend = dist.config.runtime().backend
    gated = GatedClient(backend.events.client)
    backend.events.client = gated  # the sender's next round trip waits for the gate
    refs = [StepRef("a-run", "root/turn-0/tool/call_0_0", "tool", "a-run/root")]
    with backend.deferring_events():
        backend.events.publish_many("a-run", [durable("a-run", 1)])
    backend.hand_off(refs)
    queue = redis.Redis.from_url(dist.redis.url)
    assert queue.llen("lg.tools") == 0

    threading.Timer(0.2, gated.gate.set).start()
    backend.shutdown()  # waits for the sender: the event, then the step's message

    assert queue.llen("lg.tools") == 1
    queue.close()
