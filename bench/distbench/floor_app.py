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

``durable_hop`` is the *protocol floor*: the same chain, but each task also
does the least store work the step protocol asks of a step, on the run store's
PostgreSQL, with no engine around it: a claim (a conditional UPDATE of the
step row, flushed, as the engine's claim) and a durable commit (the step's
result, the frame's version, the next step's row and one event, flushed), each
one pipelined round trip, before it enqueues the next hop. Its time per hop is
what the protocol costs on this machine before LittleGhost adds anything; the tables it uses
(``bench_protocol_*``) are created by :func:`create_protocol_tables`.
"""

from __future__ import annotations

import os
import threading
import time

import psycopg
import redis
from celery import Celery

from lg_core import Configuration
from lg_workers.app_factory import celery_settings

QUEUE = "bench.floor"
TASK = "bench.hop"
DURABLE_TASK = "bench.durable_hop"

_local = threading.local()


def create_floor_app(broker_url: str) -> Celery:
    """A Celery app with exactly lg_workers' settings, routing ``bench.hop`` to ``bench.floor``."""
    app = Celery("lg-bench-floor", set_as_current=False)
    settings = celery_settings(Configuration(broker_url=broker_url))
    settings.update(
        imports=[], task_default_queue=QUEUE, task_routes={TASK: {"queue": QUEUE}, DURABLE_TASK: {"queue": QUEUE}}
    )
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


# -- the protocol floor ----------------------------------------------------------------------

PROTOCOL_TABLES = (
    "CREATE TABLE IF NOT EXISTS bench_protocol_frames (id text PRIMARY KEY, version int NOT NULL,"
    " checkpoint text NOT NULL)",
    "CREATE TABLE IF NOT EXISTS bench_protocol_steps (chain text, key int, status text NOT NULL, attempts int NOT NULL,"
    " holder text, result text, PRIMARY KEY (chain, key))",
    "CREATE TABLE IF NOT EXISTS bench_protocol_events (chain text, seq int, data text NOT NULL,"
    " PRIMARY KEY (chain, seq))",
)
_CHECKPOINT = '{"v":1,"turn":0,"phase":"model","message_count":0}' + " " * 200  # about a real frame's size
_RESULT = '{"tool_result":{"kind":"tool_result","status":"success"}}' + " " * 100
_EVENT = '{"type":"tool_call_end","data":{}}' + " " * 150


def libpq_url(store_url: str) -> str:
    """The run store's SQLAlchemy URL as psycopg takes it."""
    return store_url.replace("postgresql+psycopg://", "postgresql://", 1)


def create_protocol_tables(store_url: str) -> None:
    with psycopg.connect(libpq_url(store_url), autocommit=True) as conn:
        for statement in PROTOCOL_TABLES:
            conn.execute(statement)


def start_protocol_chain(store_url: str, chain: str) -> None:
    """The chain's frame and its first step, scheduled (what a run's creation writes)."""
    with psycopg.connect(libpq_url(store_url), autocommit=True) as conn, conn.transaction():
        conn.execute("INSERT INTO bench_protocol_frames VALUES (%s, 0, %s)", (chain, _CHECKPOINT))
        conn.execute("INSERT INTO bench_protocol_steps VALUES (%s, 0, 'scheduled', 0, NULL, NULL)", (chain,))


def _store() -> psycopg.Connection:
    conn = getattr(_local, "store", None)
    if conn is None or getattr(_local, "store_pid", None) != os.getpid():
        conn = psycopg.connect(libpq_url(os.environ["LG_RUN_STORE"]), autocommit=True)
        _local.store, _local.store_pid = conn, os.getpid()
    return conn


def _claim(conn: psycopg.Connection, chain: str, key: int) -> None:
    with conn.pipeline():
        cursor = conn.cursor()
        cursor.execute("BEGIN")
        cursor.execute(
            "UPDATE bench_protocol_steps SET status = 'running', attempts = attempts + 1, holder = %s"
            " WHERE chain = %s AND key = %s AND status = 'scheduled' RETURNING attempts",
            (f"bench:{os.getpid()}", chain, key),
        )
        conn.cursor().execute("COMMIT")
        if cursor.fetchone() is None:  # one round trip for all four statements
            raise RuntimeError(f"step {key} of protocol chain {chain} was not scheduled")


def _commit(conn: psycopg.Connection, chain: str, key: int) -> None:
    with conn.pipeline():
        cursor = conn.cursor()
        cursor.execute("BEGIN")
        cursor.execute(
            "UPDATE bench_protocol_steps SET status = 'succeeded', result = %s WHERE chain = %s AND key = %s",
            (_RESULT, chain, key),
        )
        cursor.execute(
            "UPDATE bench_protocol_frames SET version = version + 1, checkpoint = %s WHERE id = %s",
            (_CHECKPOINT, chain),
        )
        cursor.execute("INSERT INTO bench_protocol_steps VALUES (%s, %s, 'scheduled', 0, NULL, NULL)", (chain, key + 1))
        cursor.execute("INSERT INTO bench_protocol_events VALUES (%s, %s, %s)", (chain, key, _EVENT))
        cursor.execute("COMMIT")


@app.task(name=DURABLE_TASK)
def durable_hop(chain: str, key: int, remaining: int) -> None:
    """One hop of the protocol floor: claim step ``key``, commit it with its successor, enqueue that."""
    conn = _store()
    _claim(conn, chain, key)
    _commit(conn, chain, key)
    if remaining > 0:
        durable_hop.apply_async((chain, key + 1, remaining - 1), queue=QUEUE)
    else:
        _redis().rpush(done_key(chain), repr(time.time()))
