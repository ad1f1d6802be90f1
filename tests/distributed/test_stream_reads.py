"""A quiet live stream: a reader's longest blocking read must come back empty, not fail.

Execution.events() blocks in XREAD for up to MAX_QUIET_SECONDS (5 s) while a run
is quiet. redis-py 8 gives sockets a 5 s timeout by default, so that read used
to raise, the reader took Redis for unreachable and then paused for 5 s without
reading the stream: live events of a run that had been quiet arrived up to 5 s
late. These reads run against the real redis-server with the clients
CeleryBackend builds (lg_workers.streams.connect / connect_async).
"""

from __future__ import annotations

import asyncio

from lg_core.execution_follow import MAX_QUIET_SECONDS
from lg_workers.streams import RedisLiveSource, connect


def test_the_longest_blocking_read_of_a_quiet_stream_returns_empty(redis_server):
    client = connect(redis_server.url)
    source = RedisLiveSource(client, "a-quiet-run", redis_server.url)

    async def both() -> tuple[object, object]:
        try:
            return await asyncio.gather(
                asyncio.to_thread(source.read, "0", MAX_QUIET_SECONDS),
                source.aread("0", MAX_QUIET_SECONDS),
            )
        finally:
            await source.aclose()

    try:
        blocking, awaited = asyncio.run(both())
    finally:
        client.close()

    # None would mean "Redis unreachable" (the reader then stops reading the stream for a while).
    assert blocking == [] and awaited == []


def test_a_retried_runs_stream_no_longer_expires_with_its_earlier_ending(redis_server):
    """A run's stream expires a day after its terminal event. A retry reopens the run on the same
    stream: the expiry set by the failure stayed, so a run retried late lost its live stream (and
    every delta) in the middle of its new attempt. The retry marker clears it; the new ending sets it."""
    from lg_core.events import StreamEvent
    from lg_workers.streams import RETENTION_SECONDS, RedisEventSink, stream_key

    client = connect(redis_server.url)
    sink = RedisEventSink(client)
    key = stream_key("a-retried-run")
    try:
        sink.publish("a-retried-run", StreamEvent.build("run_error", message="boom").with_seq(1))
        assert 0 < client.ttl(key) <= RETENTION_SECONDS
        sink.publish("a-retried-run", StreamEvent.build("run_retried", step="root/turn-0/model").with_seq(2))
        assert client.ttl(key) == -1  # kept while the reopened run goes on
        sink.publish("a-retried-run", StreamEvent.build("run_stop", response="ok").with_seq(3))
        assert 0 < client.ttl(key) <= RETENTION_SECONDS
    finally:
        client.delete(key)
        client.close()


def test_a_durable_event_is_located_in_the_stream_across_pages(redis_server, monkeypatch):
    """``locate`` finds where a bare sequence number sits, so a reader resuming from it reads
    the live-only events after it; it pages through the stream, and says None for an event
    the stream does not hold and for a stream that does not exist."""
    from lg_core.events import StreamEvent
    from lg_workers import streams
    from lg_workers.streams import RedisEventSink, stream_key

    monkeypatch.setattr(streams, "LOCATE_PAGE", 3)
    client = connect(redis_server.url)
    sink = RedisEventSink(client)
    key = stream_key("a-located-run")
    try:
        for seq in range(1, 6):
            sink.publish("a-located-run", StreamEvent.build("text_delta", text=str(seq)))
            sink.publish("a-located-run", StreamEvent.build("usage").with_seq(seq))
        source = RedisLiveSource(client, "a-located-run")
        position = source.locate(4)
        after = source.read(position, 0.01)
        assert [(e.type, e.seq) for _pos, e in after] == [("text_delta", None), ("usage", 5)]
        assert source.locate(6) is None
        # Not in the stream, but the event after it is (a fork's stream starts at its marker):
        client.xdel(key, position)
        after = source.read(source.locate(4), 0.01)
        assert [(e.type, e.seq) for _pos, e in after] == [("usage", 5)]  # the deltas of unknown age are skipped
        assert RedisLiveSource(client, "no-such-run").locate(1) is None
    finally:
        client.delete(key)
        client.close()


def test_a_position_just_before_a_new_millisecond_is_covered_by_its_entry():
    """locate's "just before" position of an entry ``<ms>-0`` is ``<ms-1>-<2^64-1>``: the entry
    right after it is that entry, so a stream starting there covers it (no needless backfill)."""
    from lg_workers.streams import _id_le, _just_before

    assert _just_before("1700000000005-0") == "1700000000004-18446744073709551615"
    assert _just_before("1700000000005-3") == "1700000000005-2"
    assert _id_le("1700000000005-0", _just_before("1700000000005-0"))
    assert not _id_le("1700000000005-1", _just_before("1700000000005-0"))
