"""Live event streams in Redis.

Every Redis key this project uses, with its lifetime:

    lg:events:{run_id}   Stream. Every event of a run, in the order it was
                         published: live-only events (deltas, start markers) as
                         they happen, durable events right after their commit,
                         with their durable ``seq``. Trimmed to about
                         ``MAX_EVENTS`` entries; expires ``RETENTION_SECONDS``
                         after the run's terminal event (a retry's
                         ``run_retried`` lifts that until the next ending).
    lg:ratelimit:{connection}  String. The next free slot for a rate-limited
                         model call on that provider connection (GCRA by
                         reservation, lg_core.rate_limit), shared by every
                         process on this Redis; expires a minute after the
                         last reserved slot.
    (Celery's own keys)  the broker queues ``lg.orchestrate``, ``lg.model``,
                         ``lg.tools``, ``lg.sandbox`` and their unacked sets.

Redis is transport only (the run store is the source of truth): if it is lost,
readers fall back to the run store's durable event log (see lg_core.execution_follow)
and no run is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any, cast

import redis
import redis.asyncio

from lg_core.agent_stream import decoded_wrapper
from lg_core.engine.codec import decode_event_data, encode_event_data
from lg_core.events import StreamEvent

log = logging.getLogger(__name__)

MAX_EVENTS = 20_000
LOCATE_PAGE = 1_000
RETENTION_SECONDS = 24 * 3600
# redis-py 8 gives every socket a 5 s timeout by default, and a quiet reader blocks
# in XREAD for up to 5 s (lg_core.execution_follow.MAX_QUIET_SECONDS): the socket gave up
# first, the read raised, and the reader took Redis for unreachable and paused
# without reading the stream. Our clients wait longer than any blocking read.
SOCKET_TIMEOUT = 10.0
MAX_BLOCK_SECONDS = SOCKET_TIMEOUT - 2.0
# Without a connect timeout an unreachable host (packets dropped, not refused)
# would hold a publishing worker or a web request for the OS's TCP timeout (minutes).
CONNECT_TIMEOUT = 5.0
# How long a durable publish waits for the sender: past a connect and a socket
# timeout, Redis is unreachable and the store's event log serves readers anyway.
SEND_WAIT_SECONDS = CONNECT_TIMEOUT + 2 * SOCKET_TIMEOUT
# Events that continue a run after its terminal event (lg_core.replay.retry).
REOPENING_EVENTS = frozenset({"run_retried"})
# How long the sender thread gathers queued events after a send before it sends
# again (a flush never waits for it). Every send wakes that thread, which then
# holds the GIL the steps' threads want back after each of their database round
# trips: sending once per step cost a chain about 0.6 ms per step
# (bench/FINDINGS.md, eighteenth session). 10 ms is shorter than the time between
# two tokens of a streaming model, so a live reader sees no difference.
SENDER_LINGER_SECONDS = 0.01


def connect(url: str) -> redis.Redis:
    """The synchronous client for event sinks and live readers (see SOCKET_TIMEOUT)."""
    return redis.Redis.from_url(
        url, health_check_interval=30, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT
    )


def stream_key(run_id: str) -> str:
    return f"lg:events:{run_id}"


class RedisEventSink:
    """Publishes runs' events to their Redis Streams (best effort: Redis is only transport).

    A live-only event (a text delta, a start marker: no durable ``seq``) is
    queued and the caller goes on at once; one sender thread per process sends
    whatever has queued up in one pipeline, at most every ``linger`` seconds
    (``SENDER_LINGER_SECONDS``), so a model streaming fast costs one round trip
    per burst instead of one per delta, and a slow one still sees each delta
    leave within ``linger`` of being emitted. A durable event, and a commit's events
    (``publish_many``), wait until everything queued before them and they
    themselves are in Redis: the step's successor is published only after that,
    so the next step's events (from any process) always follow this step's.

    Inside ``deferring()`` (a worker task running the steps that follow its own,
    lg_workers.continuation) a commit's events are queued like deltas instead:
    the next step runs in this process and queues its own events behind them,
    so their order holds without the step waiting for Redis. What leaves for
    another process must still follow them: ``flush()`` comes first
    (CeleryBackend.publish), and leaving ``deferring()`` flushes too.
    """

    def __init__(self, client: redis.Redis, *, linger: float = SENDER_LINGER_SECONDS) -> None:
        self.client = client
        self.linger = linger
        self._start_over()
        _SINKS.add(self)

    def _start_over(self) -> None:
        """Empty state, no sender yet; also what a forked child starts from (its parent's
        sender thread did not survive the fork, and the lock may have been held by it)."""
        self._lock = threading.Condition()
        self._queue: list[tuple[str, StreamEvent]] = []
        self._queued = 0  # tickets handed out: events ever queued in this process
        self._sent = 0  # tickets whose events have been sent (or given up on)
        self._sending = False  # a batch is on its way: the next one waits for it (order)
        self._sender: threading.Thread | None = None
        self._last_send = time.monotonic() - self.linger  # when the sender thread last sent
        self._local = threading.local()

    def publish(self, run_id: str, event: StreamEvent) -> None:
        if event.seq is None or self._deferring():
            self._enqueue(run_id, [event])
        else:
            self._flush(run_id, [event])

    def publish_many(self, run_id: str, events: list[StreamEvent]) -> None:
        """Append ``events`` to the run's stream in order; returns once they are in Redis
        (inside ``deferring()``: at once, with the events queued)."""
        if not events:
            return
        if self._deferring():
            self._enqueue(run_id, events)
        else:
            self._flush(run_id, events)

    @contextlib.contextmanager
    def deferring(self) -> Iterator[None]:
        """Queue this thread's durable events instead of waiting for each commit's; flush at the end."""
        outer = self._deferring()
        self._local.deferring = True
        try:
            yield
        finally:
            self._local.deferring = outer
            if not outer:
                self.flush()

    def flush(self) -> None:
        """Return once every event queued so far (by any thread of this process) is in Redis."""
        self._flush("", [])  # no events of its own: the run id is not used

    def _deferring(self) -> bool:
        return getattr(self._local, "deferring", False)

    def _enqueue(self, run_id: str, events: list[StreamEvent]) -> None:
        """Queue ``events`` for the sender thread (woken only if the queue was empty:
        with events queued it is already sending or lingering, and will take these too)."""
        with self._lock:
            idle = not self._queue
            self._queue_locked(run_id, events)
            if idle:
                self._lock.notify_all()

    def _queue_locked(self, run_id: str, events: list[StreamEvent]) -> int:
        """Add ``events`` to the queue; returns the ticket of the last one."""
        if self._sender is None:
            self._sender = threading.Thread(target=self._send_forever, name="lg-event-sender", daemon=True)
            self._sender.start()
        self._queue.extend((run_id, event) for event in events)
        self._queued += len(events)
        return self._queued

    def _flush(self, run_id: str, events: list[StreamEvent]) -> None:
        """Queue ``events`` and return once they and everything before them are sent.

        The caller sends the queue itself when no send is in progress, rather than
        handing it to the sender thread and waiting to be woken: that would put two
        thread switches on every step's path to publishing its successor.
        """
        deadline = time.monotonic() + SEND_WAIT_SECONDS
        with self._lock:
            ticket = self._queue_locked(run_id, events)
            while self._sent < ticket:
                if not self._sending and self._queue:
                    self._send_queued_locked()
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("events still unsent to Redis after %.0f s; going on without them", SEND_WAIT_SECONDS)
                    return
                self._lock.wait(left)

    def _send_forever(self) -> None:
        with self._lock:
            while True:
                if not self._queue or self._sending:
                    self._lock.wait()
                    continue
                due = self._last_send + self.linger - time.monotonic()
                if due > 0:  # gather what queues meanwhile into the same pipeline
                    self._lock.wait(due)
                    continue
                self._send_queued_locked()
                self._last_send = time.monotonic()

    def _send_queued_locked(self) -> None:
        """Send everything queued, in order, with the lock released during the round trip."""
        batch, self._queue = self._queue, []
        self._sending = True
        self._lock.release()
        try:
            self._send(batch)
        finally:
            self._lock.acquire()
            self._sending = False
            self._sent += len(batch)
            self._lock.notify_all()

    def _send(self, batch: list[tuple[str, StreamEvent]]) -> None:
        try:
            pipe = self.client.pipeline(transaction=False)
            for run_id, event in batch:
                pipe.xadd(stream_key(run_id), _fields(event), maxlen=MAX_EVENTS, approximate=True)
                if event.terminal:
                    pipe.expire(stream_key(run_id), RETENTION_SECONDS)
                elif event.type in REOPENING_EVENTS:
                    # A retry reopens a finished run on its stream: the expiry its earlier
                    # ending set would drop the stream (and every delta) mid-attempt.
                    pipe.persist(stream_key(run_id))
            pipe.execute()
        except redis.RedisError:
            pass  # readers recover durable events from the store; deltas are lost with Redis
        except Exception:  # noqa: BLE001 - e.g. an event that does not encode: never stop the sender
            log.exception("could not send %d events to Redis", len(batch))


_SINKS: weakref.WeakSet[RedisEventSink] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for sink in list(_SINKS):
        sink._start_over()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _fields(event: StreamEvent) -> dict[Any, Any]:
    """One stream entry: the event's type, its encoded data and its durable seq (if any)."""
    # A durable event leaves as stored (never more than the store holds), else encoded now.
    data = event.stored if event.stored is not None else encode_event_data(event.data)
    fields: dict[Any, Any] = {"type": event.type, "data": json.dumps(data)}
    if event.seq is not None:
        fields["seq"] = event.seq
    return fields


def connect_async(url: str) -> redis.asyncio.Redis:
    """The ``redis.asyncio`` client of one async reader (see SOCKET_TIMEOUT)."""
    return redis.asyncio.Redis.from_url(
        url, health_check_interval=30, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT
    )


class RedisLiveSource:
    """Reads one run's stream for Execution.events(), blocking (``read``) or async (``aread``).

    Reads return None when Redis cannot be reached, so the reader falls back to
    the run store instead of spinning. An async reader has a ``redis.asyncio``
    client of its own, opened by its first read and closed by ``aclose`` when
    its iteration ends: an asyncio connection belongs to the loop that opened
    it, and clients kept per loop outlived their loop (each ``asyncio.run`` that
    read events left a Redis connection open, and the closed loop in memory).
    """

    def __init__(self, client: redis.Redis, run_id: str, async_url: str | None = None) -> None:
        self.client = client
        self.async_url = async_url
        self._async_client: redis.asyncio.Redis | None = None
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

    def locate(self, seq: int) -> str | None:
        """Where to read from to get what followed durable event ``seq``: its stream id; or, when the
        stream does not hold it (a fork's stream starts at its ``run_forked`` marker, ``seq`` + 1),
        the position just before event ``seq`` + 1. None when it holds neither.

        Asked once per reader that resumes from a bare sequence number. Scans from the oldest
        entry in pages of LOCATE_PAGE; the stream is capped at MAX_EVENTS entries.
        """
        start, following = "-", None
        try:
            while True:
                # (redis-py types it Optional, for its async client)
                page = cast("list[Any]", self.client.xrange(self.key, min=start, max="+", count=LOCATE_PAGE))
                for entry_id, fields in page:
                    found = fields.get(b"seq", fields.get("seq"))
                    if found is None:
                        continue
                    if int(_decode(found)) == seq:
                        return _decode(entry_id)
                    if int(_decode(found)) == seq + 1 and following is None:
                        following = _just_before(_decode(entry_id))
                if len(page) < LOCATE_PAGE:
                    return following
                start = "(" + _decode(page[-1][0])
        except redis.RedisError:
            return None

    def end(self) -> str | None:
        """The id of the stream's newest entry ("0" before its first); None when Redis cannot be reached."""
        try:
            newest = cast("list[Any]", self.client.xrevrange(self.key, max="+", min="-", count=1))
        except redis.RedisError:
            return None
        return _decode(newest[0][0]) if newest else "0"

    async def acovers(self, position: str) -> bool:
        if self.async_url is None:
            return await asyncio.to_thread(self.covers, position)
        try:
            info = await self._async().xinfo_stream(self.key)
        except redis.RedisError:
            return False
        return _covers(info, position)

    async def aread(self, position: str, block: float) -> list[tuple[str, StreamEvent]] | None:
        if self.async_url is None:
            return await asyncio.to_thread(self.read, position, block)
        try:
            result = await self._async().xread({self.key: position or "0"}, count=500, block=_block_ms(block))
        except redis.RedisError:
            return None
        return _entries(result)

    async def aclose(self) -> None:
        """Close this reader's asyncio connection (Execution.events() calls it when an iteration ends)."""
        client, self._async_client = self._async_client, None
        if client is not None:
            await client.aclose()

    def _async(self) -> redis.asyncio.Redis:
        if self._async_client is None:
            self._async_client = connect_async(str(self.async_url))
        return self._async_client


def _covers(info: dict[Any, Any], position: str) -> bool:
    first = info.get("first-entry")
    if position in ("", "0"):
        added: int = info.get("entries-added", -1)
        length: int = info.get("length", 0)
        return added == length
    return first is not None and _id_le(_decode(first[0]), position)


_MAX_ID_PART = 2**64 - 1  # a stream id is two unsigned 64-bit numbers, "<ms>-<seq>"


def _just_before(entry_id: str) -> str:
    """The greatest stream id below ``entry_id``: XREAD after it starts at that entry."""
    millis, sequence = (int(part) for part in entry_id.split("-"))
    return f"{millis}-{sequence - 1}" if sequence > 0 else f"{millis - 1}-{_MAX_ID_PART}"


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
    type, raw = _decode(data["type"]), json.loads(_decode(data["data"]))
    payload = decoded_wrapper(raw) if type == "agent_stream" else decode_event_data(raw)
    return StreamEvent(type, MappingProxyType(payload), int(_decode(seq)) if seq is not None else None)


def _id_le(first: str, position: str) -> bool:
    """Is stream id ``first`` <= the entry right after ``position``? (i.e. nothing after it was trimmed)"""
    try:
        a = tuple(int(x) for x in first.split("-"))
        b = tuple(int(x) for x in position.split("-"))
    except ValueError:
        return False
    if len(b) != 2:
        return a <= b
    following = (b[0], b[1] + 1) if b[1] < _MAX_ID_PART else (b[0] + 1, 0)
    return a <= following


__all__ = [
    "MAX_BLOCK_SECONDS",
    "MAX_EVENTS",
    "RETENTION_SECONDS",
    "SOCKET_TIMEOUT",
    "RedisEventSink",
    "RedisLiveSource",
    "connect",
    "connect_async",
    "stream_key",
]
