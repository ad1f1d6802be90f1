"""Checking the broker before writing anything that needs it.

A retry, a fork or a batch reopens or creates runs whose steps only workers
execute; if the broker cannot be reached, those runs would sit with nobody to
run them (until a scheduler's relay re-sends their steps). So callers ping it
first and refuse with a message the user can act on.
"""

from __future__ import annotations

from lg_core.errors import ConfigurationError
from lg_core.urls import safe_url


def check_broker(url: str) -> None:
    """Raise ConfigurationError unless a Redis broker answers at ``url``."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
    except ValueError as exc:
        raise ConfigurationError(f"broker_url {safe_url(url)!r} is not a Redis URL: {exc}") from None
    try:
        client.ping()
    except redis.RedisError as exc:
        raise ConfigurationError(
            f"cannot reach the broker at {safe_url(url)}: {exc}; start it (lg stack up) or fix broker_url"
        ) from None
    finally:
        client.close()


__all__ = ["check_broker"]
