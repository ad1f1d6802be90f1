"""Rate limits for batch submission: ``N/s``, ``N/min`` or ``N/h`` per provider connection.

A batch throttles the *starts* of its runs, one limiter key per provider
connection (the part before ``:`` in the model target an item resolves to,
e.g. ``openai`` or ``scripted``), so items on different providers do not wait
for each other.

The limiter is GCRA (the "generic cell rate algorithm", a token bucket that
stores one timestamp instead of a token count) with a burst of one: starts on
a connection are spaced at least ``period / N`` apart, so any half-open window
of one period holds at most ``N`` starts. No bursts: providers enforce their
limits over windows shorter than a minute too.

Where it is enforced, and why there:

* Runs are started only by the submitting process, so the limiter sits in
  the submitter, in front of ``start_execution``; workers never start runs.
* With a broker configured the limiter state lives in Redis
  (``lg:ratelimit:{connection}``, one GCRA timestamp updated by a Lua script
  on Redis's clock), so every submitter on the same Redis shares one budget
  per connection: two batches against one provider, or a batch re-run while
  the old process lingers, together stay within the limit. A submitter with a
  different ``N`` advances the shared timestamp by its own interval.
* Without a broker (runs on threads of this process) the state is in memory.

What it does not do: it throttles run starts, not each model call. A run's
later turns follow at the pace of the run itself; ``--concurrency`` bounds how
many runs (and so how many concurrent model calls per batch) are in flight.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from lg_core.errors import InvocationError

_PERIODS = {
    "s": 1.0, "sec": 1.0, "second": 1.0,
    "min": 60.0, "minute": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0,
}
_SYNTAX = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([a-z]+?)s?\s*$")
KEY_PREFIX = "lg:ratelimit:"


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` run starts per ``period`` seconds, per provider connection."""

    count: float
    period: float

    @classmethod
    def parse(cls, text: Any) -> RateLimit:
        """``"10/s"``, ``"600/min"``, ``"2.5/s"``, ``"1000/h"``; InvocationError otherwise."""
        if isinstance(text, RateLimit):
            return text
        hint = "use N/s, N/min or N/h with N > 0, for example 10/s or 600/min"
        if not isinstance(text, str):
            raise InvocationError(f"rate limit must be text like '10/s', got {type(text).__name__}; {hint}")
        match = _SYNTAX.match(text.lower())
        if match is None or match.group(2) not in _PERIODS:
            raise InvocationError(f"rate limit {text!r} is not understood; {hint}")
        count = float(match.group(1))
        if count <= 0:
            raise InvocationError(f"rate limit {text!r} allows nothing; {hint}")
        return cls(count, _PERIODS[match.group(2)])

    @property
    def interval(self) -> float:
        """Seconds between two starts on one connection."""
        return self.period / self.count

    def __str__(self) -> str:
        unit = {1.0: "s", 60.0: "min", 3600.0: "h"}.get(self.period, f"{self.period:g}s")
        return f"{self.count:g}/{unit}"


class Limiter(Protocol):
    def try_acquire(self, connection: str) -> float:
        """Take a start for ``connection``: 0.0 if granted, else seconds until one may be."""


class LocalLimiter:
    """GCRA state in this process's memory (runs on threads, no broker)."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def try_acquire(self, connection: str) -> float:
        with self._lock:
            now = self._clock()
            allowed_at = self._next.get(connection, now)
            if allowed_at > now:
                return allowed_at - now
            self._next[connection] = max(allowed_at, now) + self.limit.interval
            return 0.0


# GCRA on Redis's clock. KEYS[1] the connection's key; ARGV[1] the interval in
# seconds. Returns "0" when a start is granted, else the seconds to wait (as
# text: Lua numbers returned bare would be truncated to integers).
_GCRA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local interval = tonumber(ARGV[1])
local allowed_at = tonumber(redis.call('GET', KEYS[1]) or '0')
if allowed_at > now then
  return tostring(allowed_at - now)
end
local next_at = math.max(allowed_at, now) + interval
redis.call('SET', KEYS[1], string.format('%.6f', next_at), 'PX', math.ceil(interval * 1000) + 60000)
return '0'
"""


class RedisLimiter:
    """GCRA state in Redis, shared by every submitter using the same Redis."""

    def __init__(self, limit: RateLimit, client: Any) -> None:
        self.limit = limit
        self._script = client.register_script(_GCRA)

    def try_acquire(self, connection: str) -> float:
        wait = float(self._script(keys=[KEY_PREFIX + connection], args=[repr(self.limit.interval)]))
        return max(wait, 0.0)


__all__ = ["KEY_PREFIX", "Limiter", "LocalLimiter", "RateLimit", "RedisLimiter"]
