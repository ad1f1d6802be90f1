"""``lg ask --workers`` hands the run to real Celery workers and prints its events as they arrive."""

from __future__ import annotations

import subprocess
import sys

import dist_app
import pytest

from lg_core import get_execution

pytestmark = pytest.mark.slow


def lg_ask(dist, *args: str) -> subprocess.CompletedProcess[str]:
    # Without DIST_APP_LOG here, a logged tool call can only have run on a worker.
    env = {k: v for k, v in dist.env().items() if k not in ("DIST_APP_LOG", "COLUMNS")}
    command = [sys.executable, "-m", "lg_core.cli", "ask", "dist_app:StepAgent", "Record every step.", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)


def test_ask_with_workers_runs_on_them_and_prints_the_answer_and_tool_calls(dist):
    dist.start_workers(pool="threads", concurrency=4)

    result = lg_ask(dist, "--workers")

    assert result.returncode == 0, result.stderr
    assert result.stdout == "All steps recorded.\n"  # piped: the answer only
    first, *rest = result.stderr.splitlines()
    assert first.startswith(f"running on the workers at {dist.redis.url} (run "), first
    run_id = first.rsplit("(run ", 1)[1].rstrip(")")
    assert sum(line.startswith("-> step") for line in rest) == dist_app.TURNS
    assert rest[-1].startswith(f"completed run {run_id}")
    assert [tool for tool, _n, _key in dist.calls()] == ["step"] * dist_app.TURNS  # executed by the workers
    assert get_execution(run_id).record().status == "completed"


def test_ask_with_workers_without_streaming_waits_and_prints_the_answer(dist):
    dist.start_workers(pool="threads", concurrency=4)

    result = lg_ask(dist, "--workers", "--no-stream")

    assert result.returncode == 0, result.stderr
    assert result.stdout == "All steps recorded.\n"
    assert "-> step" not in result.stderr
    assert len(dist.calls()) == dist_app.TURNS
