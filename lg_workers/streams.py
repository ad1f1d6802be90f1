"""Live event streams in Redis.

Every Redis key this project uses, with its lifetime:

    lg:events:{run_id}   Stream. Every event of a run, in the order it was
                         published: live-only events (deltas, start markers) as
                         they happen, durable events right after their commit,
                         with their durable ``seq``. Trimmed to about
                         ``MAX_EVENTS`` entries; expires ``RETENTION_SECONDS``
                         after the run's terminal event.
    (Celery's own keys)  the broker queues ``lg.orchestrate``, ``lg.model``,
                         ``lg.tools``, ``lg.sandbox`` and their unacked sets.

Redis is transport only (DESIGN 4.1): if it is lost, readers fall back to the
run store's durable event log (see lg_core.execution) and no run is lost.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import redis

from lg_core.engine.codec import decode_event_data, encode_event_data
from lg_core.events import StreamEvent

MAX_EVENTS = 20_000
RETENTION_SECONDS = 24 * 3600


def stream_key(run_id: str) -> str:
    return f"lg:events:{run_id}"


class RedisEventSink:
    """Publishes a run's events to its Redis Stream (best effort: Redis is only transport)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._local = threading.local()

    def publish(self, run_id: str, event: StreamEvent) -> None:
        fields: dict[str, Any] = {"type": event.type, "data": json.dumps(encode_event_data(event.data))}
        if event.seq is not None:
            fields["seq"] = event.seq
        key = stream_key(run_id)
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.xadd(key, fields, maxlen=MAX_EVENTS, approximate=True)
            if event.terminal:
                pipe.expire(key, RETENTION_SECONDS)
            pipe.execute()
        except redis.RedisError:
            pass  # readers recover durable events from the store; deltas are lost with Redis


class RedisLiveSource:
    """Reads one run's stream for Execution.events()."""

    def __init__(self, client: redis.Redis, run_id: str) -> None:
        self.client = client
        self.key = stream_key(run_id)

    def covers(self, position: str) -> bool:
        try:
            info = self.client.xinfo_stream(self.key)
        except redis.ResponseError:
            return False  # no stream (never created, expired, or Redis was wiped)
        except redis.RedisError:
            return False
        first = info.get("first-entry")
        if position in ("", "0"):
            return info.get("entries-added", 0) == info.get("length", 0)
        return first is not None and _id_le(_decode(first[0]), position)

    def read(self, position: str, block: float) -> list[tuple[str, StreamEvent]]:
        try:
            result = self.client.xread({self.key: position or "0"}, count=500, block=max(1, int(block * 1000)))
        except redis.RedisError:
            return []
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
    from types import MappingProxyType

    return StreamEvent(_decode(data["type"]), MappingProxyType(payload), int(_decode(seq)) if seq is not None else None)


def _id_le(first: str, position: str) -> bool:
    """Is stream id ``first`` <= the entry right after ``position``? (i.e. nothing after it was trimmed)"""
    try:
        a = tuple(int(x) for x in first.split("-"))
        b = tuple(int(x) for x in position.split("-"))
    except ValueError:
        return False
    return a <= (b[0], b[1] + 1) if len(b) == 2 else a <= b


__all__ = ["MAX_EVENTS", "RETENTION_SECONDS", "RedisEventSink", "RedisLiveSource", "stream_key"]
