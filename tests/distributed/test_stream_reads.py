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

from lg_core.execution import MAX_QUIET_SECONDS
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
