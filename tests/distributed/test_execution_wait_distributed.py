"""Execution.wait on runs executed by real workers: it waits on the run's Redis stream for the
terminal event (the store has the final word), times out as documented, returns at once for a
run that already finished, and still returns when the stream is lost (it polls the store then)."""

from __future__ import annotations

import asyncio
import threading

import dist_app
import pytest
import redis

from lg_core import get_execution
from lg_core.errors import DeadlineExceededError
from lg_workers.streams import stream_key

pytestmark = pytest.mark.slow


@pytest.fixture
def workers(dist):
    return dist.start_workers(pool="threads", concurrency=8)


def hold(dist, n: int) -> None:
    (dist.ready_dir / f"hold-{n}").touch()


def release_later(dist, n: int, seconds: float) -> None:
    threading.Timer(seconds, (dist.ready_dir / f"hold-{n}").unlink).start()


def counting_store_reads(execution, monkeypatch) -> list[str]:
    loads: list[str] = []
    store = execution.runtime.store
    original = store.load_run

    def load_run(run_id: str):
        loads.append(run_id)
        return original(run_id)

    monkeypatch.setattr(store, "load_run", load_run)
    return loads


def test_wait_times_out_at_a_held_gate_then_returns_when_the_run_ends(dist, workers, monkeypatch):
    hold(dist, 1)
    execution = get_execution(dist_app.GateAgent.start_execution("Go").run_id)  # no follower thread here
    dist.wait_for_hang("gate-1")

    with pytest.raises(DeadlineExceededError, match="is still running after 0.3 s; it keeps going"):
        execution.wait(timeout=0.3)
    loads = counting_store_reads(execution, monkeypatch)
    release_later(dist, 1, 1.5)
    run = execution.wait(timeout=60)

    assert run.completed and run.response.startswith("You said:")
    # Waiting on the stream reads the store when it starts, after each quiet read (0.5 s, then
    # 1 s) and at the end; polling it with back-off to a quarter second reads it about 15 times.
    assert len([r for r in loads if r == execution.run_id]) <= 7, loads


def test_wait_async_returns_when_the_run_ends_on_the_workers(dist, workers):
    hold(dist, 0)
    execution = get_execution(dist_app.GateAgent.start_execution("Go").run_id)
    dist.wait_for_hang("gate-0")

    async def scenario():
        with pytest.raises(DeadlineExceededError):
            await execution.wait_async(timeout=0.3)
        waiting = asyncio.create_task(execution.wait_async(timeout=60))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        (dist.ready_dir / "hold-0").unlink()
        return await waiting

    assert asyncio.run(scenario()).completed


def test_wait_on_a_run_that_already_finished_returns_it(dist, workers):
    first = dist_app.StepAgent.start_execution("Record every step.").wait(timeout=60)
    execution = get_execution(first.id)

    assert execution.wait(timeout=0.05).response == "All steps recorded."
    assert asyncio.run(execution.wait_async(timeout=0.05)).completed


def test_wait_returns_from_the_store_when_the_stream_is_lost(dist, workers):
    """The stream's terminal event never arrives (the stream was deleted, as a Redis flush does):
    the store, read whenever the stream stays quiet, says the run finished."""
    hold(dist, 1)
    execution = get_execution(dist_app.GateAgent.start_execution("Go").run_id)
    dist.wait_for_hang("gate-1")
    client = redis.Redis.from_url(dist.redis.url)
    original = execution.backend.live_source

    def unpublished(run_id):
        source = original(run_id)
        source.key = "lg-test:a-stream-nobody-writes"  # the reader never sees the run's events
        return source

    execution.backend.live_source = unpublished
    try:
        release_later(dist, 1, 0.5)
        run = execution.wait(timeout=60)
    finally:
        del execution.backend.live_source
    assert run.completed
    assert client.exists(stream_key(execution.run_id))  # the events went to the run's own stream
