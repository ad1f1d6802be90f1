"""A commit's events reach the run's stream in one round trip, in order.

The events of one commit go to the stream in one pipeline
(``RedisEventSink.publish_many``) and keep their order and their durable
``seq``. Against the real redis-server, and on real workers for the
end-to-end order.
"""

from __future__ import annotations

import json
import os
import threading
import time

import dist_app
import pytest
import redis

from lg_core.engine.dispatcher import StepRef
from lg_core.events import StreamEvent
from lg_workers.queues import MODEL, ORCHESTRATE, TOOLS
from lg_workers.streams import RETENTION_SECONDS, RedisEventSink, connect, stream_key


class CountingClient:
    """A real client that counts the pipelines it executes (each one round trip)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.round_trips = 0

    def pipeline(self, **options: object) -> object:
        pipe = self.client.pipeline(**options)
        execute = pipe.execute

        def counted(*args, **kwargs):
            self.round_trips += 1
            return execute(*args, **kwargs)

        pipe.execute = counted  # type: ignore[method-assign]  # counts the pipeline's round trips
        return pipe


def test_one_commits_events_reach_the_stream_in_one_round_trip_in_order(redis_server):
    client = connect(redis_server.url)
    counting = CountingClient(client)
    sink = RedisEventSink(counting)  # type: ignore[arg-type]
    events = [
        StreamEvent.build("message_stop", text="done").with_seq(4),
        StreamEvent.build("invocation_stop", outcome="completed").with_seq(5),
        StreamEvent.build("run_stop", outcome="completed", response="done").with_seq(6),
    ]
    try:
        sink.publish_many("batched-run", events)

        entries = client.xrange(stream_key("batched-run"))
        ttl = client.ttl(stream_key("batched-run"))
    finally:
        client.close()

    assert counting.round_trips == 1
    assert [(f[b"type"], int(f[b"seq"])) for _id, f in entries] == [
        (b"message_stop", 4),
        (b"invocation_stop", 5),
        (b"run_stop", 6),
    ]
    ids = [tuple(int(part) for part in entry_id.decode().split("-")) for entry_id, _f in entries]
    assert ids == sorted(set(ids))
    assert json.loads(entries[2][1][b"data"])["response"] == "done"
    assert 0 < ttl <= RETENTION_SECONDS  # the terminal event in the batch starts the stream's expiry


@pytest.mark.parametrize(
    "deployment",
    [
        pytest.param({"one": (ORCHESTRATE, MODEL, TOOLS)}, id="steps-follow-in-one-task"),
        pytest.param({"model": (ORCHESTRATE, MODEL), "tools": (TOOLS,)}, id="steps-alternate-between-workers"),
    ],
)
def test_a_runs_stream_holds_its_durable_events_in_commit_order(dist, deployment):
    # One worker: each task runs the steps that follow its own, their events queued behind
    # each other. Two: every step's events must be in Redis before its successor is sent.
    for queues in deployment.values():
        dist.start_workers(queues)
    execution = dist_app.StepAgent.start_execution("Record every step.")
    run = execution.wait(timeout=60)
    assert run.completed, run.error

    client = connect(dist.redis.url)
    try:
        entries = client.xrange(stream_key(execution.run_id))
    finally:
        client.close()
    streamed = [(f[b"type"].decode(), int(f[b"seq"])) for _id, f in entries if b"seq" in f]
    stored = [(event.type, event.seq) for event in run.events()]

    # Every durable event, each commit's several events together, in the store's order.
    assert streamed == stored
    assert len(stored) > 2 * dist_app.TURNS


def test_live_events_leave_without_waiting_and_keep_their_place_before_the_commits_events(redis_server):
    client = connect(redis_server.url)
    sink = RedisEventSink(client)
    live = [StreamEvent.build("text_delta", text=word) for word in ("one ", "two ", "three")]
    durable = [StreamEvent.build("message_stop", text="one two three").with_seq(2)]
    try:
        for event in live:
            sink.publish("live-run", event)  # queued for the sender thread: returns at once
        deadline = time.monotonic() + 60
        while client.xlen(stream_key("live-run")) < len(live) and time.monotonic() < deadline:
            time.sleep(0.01)  # the sender sends them with no flush behind them
        sink.publish_many("live-run", durable)
        entries = client.xrange(stream_key("live-run"))
    finally:
        client.close()

    assert [f[b"type"] for _id, f in entries] == [b"text_delta"] * 3 + [b"message_stop"]
    assert [json.loads(f[b"data"]).get("text") for _id, f in entries[:3]] == ["one ", "two ", "three"]


def test_a_commits_flush_sends_the_live_events_queued_before_it_first(redis_server):
    client = connect(redis_server.url)
    sink = RedisEventSink(client)
    try:
        for index in range(200):  # a burst: most are still queued when the flush comes
            sink.publish("burst-run", StreamEvent.build("text_delta", text=str(index)))
        sink.publish_many("burst-run", [StreamEvent.build("run_stop", outcome="completed").with_seq(7)])
        entries = client.xrange(stream_key("burst-run"))  # no wait: publish_many returned after the send
    finally:
        client.close()

    texts = [json.loads(f[b"data"]).get("text") for _id, f in entries[:-1]]
    assert texts == [str(index) for index in range(200)]
    assert entries[-1][1][b"type"] == b"run_stop"


def test_a_forked_child_publishes_with_its_own_sender(redis_server):
    """Prefork pool children inherit the sink from their parent, but not its sender thread."""
    client = connect(redis_server.url)
    sink = RedisEventSink(client)
    sink.publish_many("fork-run", [StreamEvent.build("invocation_start", input="hi").with_seq(1)])  # parent's sender
    pid = os.fork()
    if pid == 0:  # the child: publish and leave without running the parent's cleanup
        try:
            sink.publish("fork-run", StreamEvent.build("text_delta", text="from the child"))
            sink.publish_many("fork-run", [StreamEvent.build("message_stop", text="from the child").with_seq(2)])
        finally:
            os._exit(0)
    _pid, status = os.waitpid(pid, 0)
    try:
        entries = client.xrange(stream_key("fork-run"))
    finally:
        client.close()

    assert os.waitstatus_to_exitcode(status) == 0
    assert [f[b"type"] for _id, f in entries] == [b"invocation_start", b"text_delta", b"message_stop"]


class GatedClient:
    """A real client whose pipelines wait until the test opens the gate (Redis slow to answer)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.gate = threading.Event()

    def pipeline(self, **options: object) -> object:
        pipe = self.client.pipeline(**options)
        execute = pipe.execute

        def gated(*args, **kwargs):
            assert self.gate.wait(60), "the test never opened the gate"
            return execute(*args, **kwargs)

        pipe.execute = gated  # type: ignore[method-assign]  # holds the pipeline until the gate opens
        return pipe


def _returns_within(seconds: float, action) -> bool:
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def test_inside_deferring_a_commit_does_not_wait_for_redis_and_leaving_it_sends_everything_in_order(redis_server):
    client = connect(redis_server.url)
    gated = GatedClient(client)
    sink = RedisEventSink(gated)  # type: ignore[arg-type]
    first = [StreamEvent.build("message_stop", text="one").with_seq(1)]
    second = [StreamEvent.build("tool_call_stop", tool_call_id="call-1").with_seq(2)]
    try:
        assert not _returns_within(0.5, lambda: sink.publish_many("plain-run", first))  # outside: waits for Redis
        gated.gate.set()
        time.sleep(0.2)
        gated.gate.clear()
        left = threading.Event()

        def chain() -> None:
            with sink.deferring():
                sink.publish_many("deferred-run", first)  # returns at once: queued
                sink.publish("deferred-run", StreamEvent.build("text_delta", text="next turn"))
                sink.publish_many("deferred-run", second)
                left.set()

        thread = threading.Thread(target=chain, daemon=True)
        thread.start()
        assert left.wait(5), "a commit inside deferring() waited for Redis"
        time.sleep(0.2)
        assert thread.is_alive(), "leaving deferring() did not wait for the queued events"
        gated.gate.set()
        thread.join(60)
        entries = client.xrange(stream_key("deferred-run"))  # no wait: leaving deferring() flushed
    finally:
        gated.gate.set()
        client.close()

    assert [f[b"type"] for _id, f in entries] == [b"message_stop", b"text_delta", b"tool_call_stop"]
    assert [int(f[b"seq"]) for _id, f in entries if b"seq" in f] == [1, 2]


def test_flush_waits_for_events_another_thread_deferred(redis_server):
    client = connect(redis_server.url)
    sink = RedisEventSink(client)
    deferred = threading.Event()
    release = threading.Event()

    def chain() -> None:
        with sink.deferring():
            sink.publish_many("other-thread-run", [StreamEvent.build("message_stop", text="x").with_seq(1)])
            deferred.set()
            release.wait(60)

    thread = threading.Thread(target=chain, daemon=True)
    thread.start()
    try:
        assert deferred.wait(5)
        sink.flush()  # what CeleryBackend.publish does before sending a step
        length = client.xlen(stream_key("other-thread-run"))
    finally:
        release.set()
        thread.join(60)
        client.close()

    assert length == 1


def test_a_step_leaves_for_its_queue_only_after_the_events_queued_before_it(dist):
    """CeleryBackend.publish flushes first: the step sent may run on another worker at
    once, and its events must follow the ones this process still has queued."""
    backend = dist.config.runtime().backend
    gated = GatedClient(backend.events.client)
    backend.events.client = gated
    queued, release = threading.Event(), threading.Event()

    def chain() -> None:
        with backend.events.deferring():
            backend.events.publish_many("sent-run", [StreamEvent.build("message_stop", text="x").with_seq(1)])
            queued.set()
            release.wait(60)

    chaining = threading.Thread(target=chain, daemon=True)
    chaining.start()
    client = connect(dist.redis.url)
    try:
        assert queued.wait(5)
        publishing = threading.Thread(
            target=backend.publish,
            args=([StepRef("sent-run", "root/turn-0/tool-0", "tool", "sent-run/root")],),
            daemon=True,
        )
        publishing.start()
        publishing.join(0.5)
        waiting, sent_early = publishing.is_alive(), client.llen(TOOLS)
        gated.gate.set()
        publishing.join(60)
        events, sent = client.xlen(stream_key("sent-run")), client.llen(TOOLS)
    finally:
        gated.gate.set()
        release.set()
        chaining.join(60)
        client.close()

    assert waiting and sent_early == 0  # held back while the event could not reach Redis
    assert (events, sent) == (1, 1)


def test_live_events_queued_while_the_sender_lingers_leave_together_within_the_linger(redis_server):
    client = connect(redis_server.url)
    counting = CountingClient(client)
    sink = RedisEventSink(counting, linger=2.0)  # type: ignore[arg-type]
    key = stream_key("lingering-run")

    def wait_for_length(length: int, seconds: float) -> float:
        started = time.monotonic()
        while client.xlen(key) < length and time.monotonic() - started < seconds:
            time.sleep(0.01)
        return time.monotonic() - started

    try:
        sink.publish("lingering-run", StreamEvent.build("text_delta", text="first "))
        wait_for_length(1, 5)  # the first leaves at once
        for word in ("two ", "three ", "four"):
            sink.publish("lingering-run", StreamEvent.build("text_delta", text=word))
        early = client.xlen(key)
        waited = wait_for_length(4, 5)
        entries = client.xrange(key)
    finally:
        client.close()

    assert early == 1 and waited < 5  # held back, then sent once the linger was over
    assert [json.loads(f[b"data"])["text"] for _id, f in entries] == ["first ", "two ", "three ", "four"]
    assert counting.round_trips == 2


def test_a_commits_flush_does_not_wait_for_the_senders_linger(redis_server):
    client = connect(redis_server.url)
    sink = RedisEventSink(client, linger=60)
    try:
        sink.publish("hurried-run", StreamEvent.build("text_delta", text="a"))  # starts the sender's linger
        sink.publish("hurried-run", StreamEvent.build("text_delta", text="b"))
        finished = _returns_within(
            10, lambda: sink.publish_many("hurried-run", [StreamEvent.build("message_stop", text="ab").with_seq(1)])
        )
        entries = client.xrange(stream_key("hurried-run"))
    finally:
        client.close()

    assert finished, "a durable publish waited for the sender's linger"
    assert [f[b"type"] for _id, f in entries] == [b"text_delta", b"text_delta", b"message_stop"]
