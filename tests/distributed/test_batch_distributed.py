"""Batches on real Celery workers, PostgreSQL and Redis: concurrency, a shared rate limit, and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from lg_scheduler.batch import run_id_for, submit_batch
from tests.batch.batch_app import ItemAgent, logged_items, logged_model_calls
from tests.batch.test_batch_submit import max_overlap
from tests.support.pacing import early_calls, first_model_claim

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
AGENT = "tests.batch.batch_app:ItemAgent"


def app_env(dist, **extra: str) -> dict[str, str]:
    """Env for workers and child submitters: the batch test app importable and logging its tool calls."""
    return {
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
        "LG_IMPORTS": f"dist_app,{AGENT.split(':')[0]}",
        "BATCH_APP_LOG": str(dist.tmp_path / "batch-calls.log"),
        "BATCH_APP_MODEL_LOG": str(dist.tmp_path / "model-calls.log"),
        "BATCH_APP_DELAY": "0",
        **extra,
    }


def write_inputs(path: Path, count: int, prefix: str = "item") -> Path:
    path.write_text("".join(f'"{prefix} {n}"\n' for n in range(1, count + 1)))
    return path


def child_submit(dist, path: Path, *args: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "lg_core.cli", "batch", "submit", AGENT, str(path), "--no-progress", *args]
    return subprocess.Popen(
        argv, env=dist.env(**app_env(dist)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_fifty_items_on_workers_with_concurrency_ten(dist):
    dist.start_workers(**app_env(dist))
    path = write_inputs(dist.tmp_path / "inputs.jsonl", 50)
    out = dist.tmp_path / "results.jsonl"

    report = submit_batch(ItemAgent, path, concurrency=10, out=out, progress=False)

    assert report.ok, report.outcomes
    assert (report.total, report.completed, report.started) == (50, 50, 50)
    assert sorted(json.loads(line)["line"] for line in out.read_text().splitlines()) == list(range(1, 51))
    assert Counter(logged_items(dist.tmp_path / "batch-calls.log")) == Counter(f"item {n}" for n in range(1, 51))
    store = dist.config.runtime().store
    records = [store.load_run(run_id_for(report.batch_id, str(n))) for n in range(1, 51)]
    assert all(r.status == "completed" and r.holder is None for r in records)  # held by workers step by step
    assert 1 < max_overlap(records) <= 10
    assert store.load_batch(report.batch_id).status == "finished"


def test_two_batches_share_one_model_call_rate_limit_through_redis(dist):
    """The model calls of two batches' runs, made on worker threads, keep to 10 a second together.

    40 runs of 2 model calls each, all in flight at once: unlimited they take well
    under a second. Each batch alone would keep to 10/s; if the workers did not
    share one budget per connection, the 80 calls would come 20 a second. Two
    lg.model workers share the calls, so one process's memory could not have kept
    the pace.

    The limiter spaces *reserved slots* 0.1 s apart on Redis's clock, from no
    earlier than the first model step's claim (this host's clock, as Redis's and
    the model log's are), so the k-th call comes at least k x 0.1 s after it. A call
    reaches the model when its thread wakes, which on a loaded 2-core machine can
    be a few hundred ms behind its slot, which a window count would take for a
    burst. Lateness only makes calls later, so this lower bound holds however
    loaded the machine is (tests.support.pacing), while two unshared budgets let
    the calls come twice as fast (call 79 about 4 s early). It caught calls that
    came up to one Redis round trip before their slot (the limiter's wait was
    counted from before the reservation was asked).
    """
    dist.start_workers(**app_env(dist))
    dist.start_workers(queues=("lg.model",), **app_env(dist))
    children = [
        child_submit(
            dist,
            write_inputs(dist.tmp_path / f"inputs-{name}.jsonl", 20, prefix=name),
            "--concurrency",
            "20",
            "--rate-limit",
            "10/s",
        )
        for name in ("left", "right")
    ]
    for child in children:
        _stdout, stderr = child.communicate(timeout=180)
        assert child.returncode == 0, stderr

    runs = dist.config.runtime().store.list_runs(limit=100)
    assert len(runs) == 40 and {r.status for r in runs} == {"completed"}
    calls = logged_model_calls(dist.tmp_path / "model-calls.log")
    assert len(calls) == 80
    assert len({call["pid"] for call in calls}) == 2  # both model workers called: the budget crossed processes
    first_claim = first_model_claim(dist.config.runtime().store, [r.id for r in runs])
    assert early_calls([call["at"] for call in calls], first_claim, 0.1) == []


def start_scheduler(dist) -> subprocess.Popen:
    """``lg scheduler``: a submitter killed between writing a run and publishing its first
    step leaves that step to the outbox relay, as for any distributed run."""
    argv = [sys.executable, "-m", "lg_core.cli", "scheduler", "--interval", "0.2"]
    log = (dist.tmp_path / "scheduler.log").open("w")
    return subprocess.Popen(argv, env=dist.env(**app_env(dist)), stdout=log, stderr=subprocess.STDOUT)


@pytest.mark.chaos
def test_a_killed_submitter_leaves_runs_on_workers_and_a_resubmit_waits_for_them(dist, monkeypatch):
    monkeypatch.setenv("LG_RELAY_GRACE", "2")  # every process here and below: relay lost messages after 2 s
    dist.config.relay_grace = 2
    dist.start_workers(**app_env(dist, BATCH_APP_DELAY="1.0"))
    scheduler = start_scheduler(dist)
    path = write_inputs(dist.tmp_path / "inputs.jsonl", 30)
    out = dist.tmp_path / "results.jsonl"
    child = child_submit(dist, path, "--concurrency", "10", "--out", str(out))
    deadline = time.monotonic() + 120
    store = dist.config.runtime().store
    # Kill once results are being written and a second wave has started: the first ten
    # runs start together and finish together, so only a run started later is sure to be
    # still in flight (two 1 s model turns) when the resubmit looks.
    while not (out.exists() and len(out.read_text().splitlines()) >= 5 and len(store.list_runs(limit=100)) > 10):
        assert child.poll() is None and time.monotonic() < deadline, child.stderr.read() if child.stderr else ""
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait()
    started = len(dist.config.runtime().store.list_runs(limit=100))

    try:
        report = submit_batch(ItemAgent, path, concurrency=10, out=out, progress=False)
    finally:
        scheduler.terminate()
        scheduler.wait(timeout=30)

    assert report.ok and report.completed == 30
    assert report.resumed == 0  # runs on workers are not the submitter's: they just keep going
    assert report.already_finished + report.waited == started and report.started == 30 - started
    assert report.waited > 0
    assert Counter(logged_items(dist.tmp_path / "batch-calls.log")) == Counter(f"item {n}" for n in range(1, 31))
