"""The Redis rate limiter on a real redis-server: one budget per connection for every client."""

from __future__ import annotations

import logging

import pytest
import redis

from lg_core.rate_limit import KEY_PREFIX, RateLimit, RedisLimiter

LIMIT = RateLimit.parse("4/s")


@pytest.fixture
def clients(redis_server):
    """Two clients, as two worker processes would have; the connections' keys removed afterwards."""
    made = [redis.Redis.from_url(redis_server.url) for _ in range(2)]
    yield made
    made[0].delete(*(KEY_PREFIX + name for name in ("test-shared", "test-other")))
    for client in made:
        client.close()


def test_clients_of_one_redis_reserve_consecutive_slots(clients):
    left, right = (RedisLimiter(client, errors=(redis.RedisError,)) for client in clients)

    waits = [limiter.reserve("test-shared", LIMIT) for limiter in (left, right, left, right)]

    assert waits[0] == pytest.approx(0.0, abs=0.01)
    for earlier, later in zip(waits, waits[1:], strict=False):
        assert later - earlier == pytest.approx(0.25, abs=0.02)  # Redis's clock moved a little between calls
    assert left.reserve("test-other", LIMIT) == pytest.approx(0.0, abs=0.01)  # another connection
    ttl = clients[0].pttl(KEY_PREFIX + "test-shared")
    assert 60_000 < ttl <= 61_100  # kept until a minute after the last reserved slot


def test_an_unreachable_redis_lets_the_call_go_unpaced(caplog):
    client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    limiter = RedisLimiter(client, errors=(redis.RedisError,))

    with caplog.at_level(logging.WARNING, logger="lg_core.rate_limit"):
        assert limiter.reserve("test-shared", LIMIT) == 0.0
    assert "goes ahead unpaced" in caplog.text
