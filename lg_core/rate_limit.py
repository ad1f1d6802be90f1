"""Model-call rate limits: ``N/s``, ``N/min`` or ``N/h`` per provider connection.

A run started with ``rate_limit="600/min"`` (``ask``, ``start_execution``, or
every run of ``lg batch submit --rate-limit``) spaces each of its model calls
on the connection its model uses (the part before ``:`` in the model target,
e.g. ``openai``). ``configure(rate_limits={"openai": "600/min"})`` (or
``LG_RATE_LIMITS='{"openai": "600/min"}'``, or ``rate_limits:`` in ``lg.yaml``)
paces every run's calls on that connection, unless the run has its own
``rate_limit``. Every run limited on one connection shares one budget, which
is what a provider enforces: one account, whatever runs and processes call it.

The limiter is GCRA (the "generic cell rate algorithm": a token bucket that
stores one timestamp instead of a token count) with a burst of one, used by
*reservation*: a model call takes the next free slot on its connection and
waits until that slot comes. Calls are spaced at least ``period / N`` apart,
so any half-open window of one period holds at most ``N`` calls, and idle time
does not build up a burst (providers enforce limits over windows shorter than
a minute too). Waiters queue in reservation order; none of them polls.

Where the state lives:

* With a broker configured, in Redis (``lg:ratelimit:{connection}``, one
  timestamp updated by a Lua script on Redis's clock), shared by every worker,
  web process and ``ask`` on the same Redis. Runs with different limits on
  one connection advance the shared timestamp by their own interval.
* Without a broker, in the memory of the process's runtime.

Limits it does not enforce: a slot reserved by a call whose run is cancelled
while it waits stays used, and a provider's token-per-minute budgets are the
provider's to report (a 429 is retried like any retryable provider error).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from lg_core.errors import InvocationError

log = logging.getLogger(__name__)

_PERIODS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
}
_UNITS = {1.0: "s", 60.0: "min", 3600.0: "h"}
_SYNTAX = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([a-z]+?)s?\s*$")
_HINT = "use N/s, N/min or N/h with N > 0, for example 10/s or 600/min"
KEY_PREFIX = "lg:ratelimit:"


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` model calls per ``period`` seconds, per provider connection."""

    count: float
    period: float

    @classmethod
    def parse(cls, text: Any) -> RateLimit:
        """``"10/s"``, ``"600/min"``, ``"2.5/s"``, ``"1000/h"``; InvocationError otherwise."""
        if isinstance(text, RateLimit):
            return text
        if not isinstance(text, str):
            raise InvocationError(f"rate limit must be text like '10/s', got {type(text).__name__}; {_HINT}")
        match = _SYNTAX.fullmatch(text.lower())
        if match is None or match.group(2) not in _PERIODS:
            raise InvocationError(f"rate limit {text!r} is not understood; {_HINT}")
        count = float(match.group(1))
        if count <= 0 or not math.isfinite(count):
            raise InvocationError(f"rate limit {text!r} allows nothing; {_HINT}")
        return cls(count, _PERIODS[match.group(2)])

    @property
    def interval(self) -> float:
        """Seconds between two calls on one connection."""
        return self.period / self.count

    def __str__(self) -> str:
        """The canonical text, which ``parse`` reads back to an equal limit."""
        # The shortest text that reads back to the same float (repr), in plain notation:
        # never rounded (a tiny rate must not print as 0), never 1e-07, which parse refuses.
        count = f"{Decimal(repr(float(self.count))):f}"
        if "." in count:
            count = count.rstrip("0").rstrip(".")
        return f"{count}/{_UNITS[self.period]}"


class Limiter(Protocol):
    def reserve(self, connection: str, limit: RateLimit) -> float:
        """Take the next slot on ``connection``; seconds until it comes (0.0: now)."""


class LocalLimiter:
    """GCRA state in this process's memory (a runtime without a broker)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def reserve(self, connection: str, limit: RateLimit) -> float:
        with self._lock:
            now = self._clock()
            slot = max(self._next.get(connection, now), now)
            self._next[connection] = slot + limit.interval
            return slot - now


# GCRA by reservation on Redis's clock. KEYS[1] the connection's key; ARGV[1]
# the interval in seconds. Returns the seconds until the reserved slot (as
# text: Lua numbers returned bare would be truncated to integers).
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local interval = tonumber(ARGV[1])
local slot = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local next_at = slot + interval
redis.call('SET', KEYS[1], string.format('%.6f', next_at), 'PX', math.ceil((next_at - now) * 1000) + 60000)
return string.format('%.6f', slot - now)
"""


class RedisLimiter:
    """GCRA state in Redis, shared by every process using the same Redis.

    Redis is transport here as everywhere (the run store is the source of truth): if it cannot
    be reached, the call goes ahead unpaced (logged), because failing a run over a limiter
    would lose more than a provider's 429, which is retried.
    """

    def __init__(self, client: Any, *, errors: tuple[type[BaseException], ...]) -> None:
        """``errors``: the client's connection errors (redis.RedisError); anything else is a bug and raises."""
        self._script = client.register_script(_RESERVE)
        self._errors = errors

    def reserve(self, connection: str, limit: RateLimit) -> float:
        try:
            wait = float(self._script(keys=[KEY_PREFIX + connection], args=[repr(limit.interval)]))
        except self._errors as exc:
            log.warning("rate limiter unreachable (%s); model call on %r goes ahead unpaced", exc, connection)
            return 0.0
        return max(wait, 0.0)


__all__ = ["KEY_PREFIX", "Limiter", "LocalLimiter", "RateLimit", "RedisLimiter"]
