"""The raw floor: a bench-only Celery app whose task enqueues the next one.

    celery -A distbench.floor_app worker -Q bench.floor --pool threads ...

It uses lg_workers' broker settings unchanged (``celery_settings``: acks_late,
prefetch 1, JSON, task events on, the same visibility timeout), so the only
difference from a LittleGhost step is everything the step does besides being
a Celery task. A chain is ``hop(chain, n)`` -> ``hop(chain, n - 1)`` -> ... ->
``hop(chain, 0)``, which pushes its wall-clock time to ``bench:floor:{chain}``
for the benchmark (blocked in BLPOP) to read. The worker's broker URL comes
from ``LG_BROKER_URL`` like every other LittleGhost process; the benchmark
builds its own sending app with :func:`create_floor_app`.
"""

from __future__ import annotations

import os
import threading
import time

import redis
from celery import Celery

from lg_core import Configuration
from lg_workers.celery_app import celery_settings

QUEUE = "bench.floor"
TASK = "bench.hop"

_local = threading.local()


def create_floor_app(broker_url: str) -> Celery:
    """A Celery app with exactly lg_workers' settings, routing ``bench.hop`` to ``bench.floor``."""
    app = Celery("lg-bench-floor", set_as_current=False)
    settings = celery_settings(Configuration(broker_url=broker_url))
    settings.update(imports=[], task_default_queue=QUEUE, task_routes={TASK: {"queue": QUEUE}})
    app.conf.update(settings)
    return app


def done_key(chain: str) -> str:
    return f"bench:floor:{chain}"


# The worker's app (``celery -A distbench.floor_app``); building it connects to nothing.
app = create_floor_app(os.environ.get("LG_BROKER_URL", "redis://127.0.0.1:6379/0"))


def _redis() -> redis.Redis:
    client = getattr(_local, "client", None)
    if client is None or getattr(_local, "pid", None) != os.getpid():
        client = redis.Redis.from_url(app.conf.broker_url)
        _local.client, _local.pid = client, os.getpid()
    return client


@app.task(name=TASK)
def hop(chain: str, remaining: int, pause: float = 0.0) -> None:
    """One hop; ``pause`` seconds of simulated model latency (section 3's Celery-only reference)."""
    if pause:
        time.sleep(pause)
    if remaining > 0:
        hop.apply_async((chain, remaining - 1, pause), queue=QUEUE)
    else:
        _redis().rpush(done_key(chain), repr(time.time()))
