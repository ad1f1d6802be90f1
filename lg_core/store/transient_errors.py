"""Which database errors are transient, and the retry loop every store transaction runs in.

Transient errors (SQLite "database is locked", PostgreSQL serialization
failures, deadlocks and dropped connections) are retried by one decorator,
:func:`retry_transient`, around whole transactions and reads. A database still
out of reach after the retries surfaces as StoreUnavailableError, one class for
callers to catch whichever driver the store uses.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from lg_core.errors import StoreUnavailableError

T = TypeVar("T")
# A database that cannot be reached now: the server is down, restarting, recovering or failing
# over, or the connection to it was dropped. A call still failing so after its retries raises
# StoreUnavailableError.
_UNREACHABLE_MARKERS = (
    "server closed the connection",
    "connection already closed",
    "terminating connection",
    "connection refused",
    "connection timeout expired",  # libpq's connect_timeout: a server or network that does not answer
    "no route to host",
    "network is unreachable",
    # psycopg 3 on a connection the server dropped (restart, pg_terminate_backend, idle timeout)
    "the connection is closed",
    "the connection is lost",
    "connection reset by peer",
    "could not receive data from server",
    # PostgreSQL refusing connections while it starts, recovers from a crash or shuts down (57P03)
    "the database system is",
    # libpq's whole message when the server answers its SSL request with an error: a backend
    # forked as the postmaster died says "terminating connection due to unexpected postmaster
    # exit" there (seen when PostgreSQL crashed under a reader that was connecting)
    "error response during ssl exchange",
)
# Contention that a second try of the whole transaction resolves.
_CONTENTION_MARKERS = (
    "database is locked",
    "database table is locked",
    "could not serialize access",
    "deadlock detected",
    # a lost race on a computed key (e.g. the next interjection number): retrying re-reads it
    "unique constraint failed",
    "duplicate key value",
)
RETRIES = 12  # tries of one call; with the pauses below, about 4-9 s in all


def is_unreachable(exc: BaseException) -> bool:
    """Is ``exc`` the database being out of reach (as opposed to busy, or refusing the statement)?"""
    if isinstance(exc, StoreUnavailableError):
        return True
    text = str(exc).lower()
    return any(marker in text for marker in _UNREACHABLE_MARKERS)


def is_transient(exc: BaseException) -> bool:
    """Would the same call succeed if tried again a little later?"""
    if is_unreachable(exc):
        return True
    text = str(exc).lower()
    return any(marker in text for marker in _CONTENTION_MARKERS)


def retry_transient(fn: Callable[..., T]) -> Callable[..., T]:
    """Retry a whole transaction on transient database errors (jittered backoff).

    When the database is still out of reach after the last try, the call raises
    StoreUnavailableError (the driver's error as its ``__cause__``): one class
    for callers to catch whichever driver the store uses, SQLAlchemy's or
    psycopg's own. A StoreUnavailableError from a call inside this one is not
    tried again: that call has spent its retries already.
    """

    # Hand-written, not tenacity: this wraps every store transaction, and a tenacity Retrying
    # costs about 18 µs per call where this loop costs 0.2 µs when the first try succeeds.

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        started = time.monotonic()
        delay = 0.005
        for attempt in range(RETRIES):
            try:
                return fn(*args, **kwargs)
            except StoreUnavailableError:
                raise
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if attempt == RETRIES - 1:
                    if is_unreachable(exc):
                        raise _unavailable(exc, time.monotonic() - started) from exc
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    return wrapper


def driver_reason(exc: BaseException) -> str:
    """The database driver's message for ``exc`` on one line (libpq's spans several, with hints)."""
    return " ".join(str(getattr(exc, "orig", None) or exc).split())


def _unavailable(exc: Exception, seconds: float) -> StoreUnavailableError:
    reason = driver_reason(exc)
    return StoreUnavailableError(
        f"the store's database could not be reached for {seconds:.1f} s ({RETRIES} tries); nothing stored "
        f"was lost, and the same call works again once the database is back. The driver said: {reason}"
    )


__all__ = ["RETRIES", "driver_reason", "is_transient", "is_unreachable", "retry_transient"]
