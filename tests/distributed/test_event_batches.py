"""A commit's events reach the run's stream in one round trip, in order.

The events of one commit go to the stream in one pipeline
(``RedisEventSink.publish_many``) and keep their order and their durable
``seq``. Against the real redis-server, and on real workers for the
end-to-end order.
"""

from __future__ import annotations

import json
import os
import time

import dist_app
import redis

from lg_core.events import StreamEvent
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

        pipe.execute = counted
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
    assert [(f[b"type"], int(f[b"seq"])) for _id, f in entries] == [(b"message_stop", 4), (b"invocation_stop", 5), (b"run_stop", 6)]
    ids = [tuple(int(part) for part in entry_id.decode().split("-")) for entry_id, _f in entries]
    assert ids == sorted(set(ids))
    assert json.loads(entries[2][1][b"data"])["response"] == "done"
    assert 0 < ttl <= RETENTION_SECONDS  # the terminal event in the batch starts the stream's expiry


def test_a_runs_stream_holds_its_durable_events_in_commit_order(dist):
    dist.start_workers()
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
