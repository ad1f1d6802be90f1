"""Live event streams in Redis.

Every Redis key this project uses, with its lifetime:

    lg:events:{run_id}   Stream. Every event of a run, in the order it was
                         published: live-only events (deltas, start markers) as
                         they happen, durable events right after their commit,
                         with their durable ``seq``. Trimmed to about
                         ``MAX_EVENTS`` entries; expires ``RETENTION_SECONDS``
                         after the run's terminal event.
    lg:ratelimit:{connection}  String. The next time a batch may start a run on
                         that provider connection (GCRA, lg_scheduler.rate_limit),
                         shared by every batch submitter; expires a minute after
                         the last start.
    (Celery's own keys)  the broker queues ``lg.orchestrate``, ``lg.model``,
                         ``lg.tools``, ``lg.sandbox`` and their unacked sets.

Redis is transport only (DESIGN 4.1): if it is lost, readers fall back to the
run store's durable event log (see lg_core.execution) and no run is lost.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from types import MappingProxyType
from typing import Any

import redis
import redis.asyncio

from lg_core.engine.codec import decode_event_data, encode_event_data
from lg_core.events import StreamEvent

MAX_EVENTS = 20_000
RETENTION_SECONDS = 24 * 3600
# redis-py 8 gives every socket a 5 s timeout by default, and a quiet reader blocks
# in XREAD for up to 5 s (lg_core.execution.MAX_QUIET_SECONDS): the socket gave up
# first, the read raised, and the reader took Redis for unreachable and paused
# without reading the stream. Our clients wait longer than any blocking read.
SOCKET_TIMEOUT = 10.0
MAX_BLOCK_SECONDS = SOCKET_TIMEOUT - 2.0
# Without a connect timeout an unreachable host (packets dropped, not refused)
# would hold a publishing worker or a web request for the OS's TCP timeout (minutes).
CONNECT_TIMEOUT = 5.0


def connect(url: str) -> redis.Redis:
    """The synchronous client for event sinks and live readers (see SOCKET_TIMEOUT)."""
    return redis.Redis.from_url(
        url, health_check_interval=30, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT
    )


def stream_key(run_id: str) -> str:
    return f"lg:events:{run_id}"


class RedisEventSink:
    """Publishes a run's events to its Redis Stream (best effort: Redis is only transport)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def publish(self, run_id: str, event: StreamEvent) -> None:
        self.publish_many(run_id, [event])

    def publish_many(self, run_id: str, events: list[StreamEvent]) -> None:
        """Append ``events`` to the run's stream in order, in one round trip (one commit's events)."""
        if not events:
            return
        key = stream_key(run_id)
        try:
            pipe = self.client.pipeline(transaction=False)
            for event in events:
                pipe.xadd(key, _fields(event), maxlen=MAX_EVENTS, approximate=True)
            if any(event.terminal for event in events):
                pipe.expire(key, RETENTION_SECONDS)
            pipe.execute()
        except redis.RedisError:
            pass  # readers recover durable events from the store; deltas are lost with Redis


def _fields(event: StreamEvent) -> dict[Any, Any]:
    """One stream entry: the event's type, its encoded data and its durable seq (if any)."""
    fields: dict[Any, Any] = {"type": event.type, "data": json.dumps(encode_event_data(event.data))}
    if event.seq is not None:
        fields["seq"] = event.seq
    return fields


class AsyncRedisClients:
    """One ``redis.asyncio`` client per event loop.

    An asyncio connection belongs to the loop that opened it, and a process may
    run several loops (tests, ``asyncio.run`` per CLI call), so clients are kept
    per loop and dropped with it.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, redis.asyncio.Redis] = weakref.WeakKeyDictionary()

    def get(self) -> redis.asyncio.Redis:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                client = redis.asyncio.Redis.from_url(
                    self.url,
                    health_check_interval=30,
                    socket_timeout=SOCKET_TIMEOUT,
                    socket_connect_timeout=CONNECT_TIMEOUT,
                )
                self._clients[loop] = client
            return client

    async def aclose(self) -> None:
        """Close this loop's client (e.g. from a web app's shutdown hook)."""
        with self._lock:
            client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


class RedisLiveSource:
    """Reads one run's stream for Execution.events(), blocking (``read``) or async (``aread``).

    Reads return None when Redis cannot be reached, so the reader falls back to
    the run store instead of spinning.
    """

    def __init__(self, client: redis.Redis, run_id: str, async_clients: AsyncRedisClients | None = None) -> None:
        self.client = client
        self.async_clients = async_clients
        self.key = stream_key(run_id)

    def covers(self, position: str) -> bool:
        try:
            info = self.client.xinfo_stream(self.key)
        except redis.RedisError:
            return False  # no stream (never created, expired, or Redis was wiped), or no Redis
        return _covers(info, position)

    def read(self, position: str, block: float) -> list[tuple[str, StreamEvent]] | None:
        try:
            result = self.client.xread({self.key: position or "0"}, count=500, block=_block_ms(block))
        except redis.RedisError:
            return None
        return _entries(result)

    async def acovers(self, position: str) -> bool:
        if self.async_clients is None:
            return await asyncio.to_thread(self.covers, position)
        try:
            info = await self.async_clients.get().xinfo_stream(self.key)
        except redis.RedisError:
            return False
        return _covers(info, position)

    async def aread(self, position: str, block: float) -> list[tuple[str, StreamEvent]] | None:
        if self.async_clients is None:
            return await asyncio.to_thread(self.read, position, block)
        try:
            result = await self.async_clients.get().xread({self.key: position or "0"}, count=500, block=_block_ms(block))
        except redis.RedisError:
            return None
        return _entries(result)


def _covers(info: dict[Any, Any], position: str) -> bool:
    first = info.get("first-entry")
    if position in ("", "0"):
        return info.get("entries-added", -1) == info.get("length", 0)
    return first is not None and _id_le(_decode(first[0]), position)


def _block_ms(block: float) -> int:
    """XREAD's block in ms, kept below the socket timeout so a quiet stream returns [] instead of raising."""
    return max(1, int(min(block, MAX_BLOCK_SECONDS) * 1000))


def _entries(result: Any) -> list[tuple[str, StreamEvent]]:
    entries: list[tuple[str, StreamEvent]] = []
    for _key, items in result or []:
        for entry_id, fields in items:
            entries.append((_decode(entry_id), _event(fields)))
    return entries


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _event(fields: dict[Any, Any]) -> StreamEvent:
    data = {(_decode(k)): v for k, v in fields.items()}
    seq = data.get("seq")
    payload = decode_event_data(json.loads(_decode(data["data"])))
    return StreamEvent(_decode(data["type"]), MappingProxyType(payload), int(_decode(seq)) if seq is not None else None)


def _id_le(first: str, position: str) -> bool:
    """Is stream id ``first`` <= the entry right after ``position``? (i.e. nothing after it was trimmed)"""
    try:
        a = tuple(int(x) for x in first.split("-"))
        b = tuple(int(x) for x in position.split("-"))
    except ValueError:
        return False
    return a <= (b[0], b[1] + 1) if len(b) == 2 else a <= b


__all__ = [
    "AsyncRedisClients",
    "MAX_BLOCK_SECONDS",
    "MAX_EVENTS",
    "RETENTION_SECONDS",
    "SOCKET_TIMEOUT",
    "RedisEventSink",
    "RedisLiveSource",
    "connect",
    "stream_key",
]
