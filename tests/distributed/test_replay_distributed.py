"""Retry and fork on real worker processes, with real Redis and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import replay_dist_app

import lg_core


def step_counts(dist) -> Counter:
    return Counter(n for tool, n, _key in dist.calls() if tool == "step")


def gapless(run) -> bool:
    seqs = [event.seq for event in run.events()]
    return seqs == list(range(1, len(seqs) + 1))


def test_retry_and_fork_execute_on_the_workers(dist, tmp_path):
    outage = tmp_path / "outage"
    outage.touch()
    dist.start_workers(LG_IMPORTS="dist_app,replay_dist_app", REPLAY_OUTAGE=str(outage))
    failed = replay_dist_app.OutageAgent.start_execution("Record every step.").wait(timeout=60)
    assert failed.outcome == "failed", failed.error
    assert step_counts(dist) == Counter(range(replay_dist_app.TOOL_TURNS))
    outage.unlink()  # the provider is back

    execution = lg_core.retry(failed.id)

    assert isinstance(execution, lg_core.Execution), "with a broker the retry runs on the workers"
    events = list(execution.events())
    run = execution.wait(timeout=60)
    assert run.outcome == "completed", run.error
    assert run.response == "All steps recorded."
    assert events[0].type == "run_retried" and events[-1].type == "run_stop"
    assert events[0].data["step"] == "root/turn-3/model"
    assert "text_delta" in {e.type for e in events}, "the retried turn streamed live"
    assert "model_retry" not in {e.type for e in events}, "a retried turn is a first attempt, not a crash's re-run"
    assert step_counts(dist) == Counter(range(replay_dist_app.TOOL_TURNS)), "no committed step ran again"
    types = [e.type for e in run.events()]
    assert types.index("run_error") + 1 == types.index("run_retried") and types[-1] == "run_stop"
    assert gapless(run)

    fork = lg_core.fork(failed.id, "root/turn-1/model", model="scripted:replay-alt")

    fork_events = list(fork.events())
    forked = fork.wait(timeout=60)
    assert forked.outcome == "completed", forked.error
    assert forked.response == "Forked after 3 messages."
    assert fork_events[0].type == "run_forked" and fork_events[-1].type == "run_stop"
    late = [event.type for event in fork.events()]  # a reader that comes after the fork ended
    assert late[0] == "run_forked" and "text_delta" in late, "the fork's deltas are read from its live stream"
    store = lg_core.current_runtime().store
    assert store.load_run(forked.id).parent_run_id == failed.id
    assert store.load_messages(f"{forked.id}/root")[:3] == store.load_messages(f"{failed.id}/root")[:3]
    assert gapless(forked)
    assert step_counts(dist) == Counter(range(replay_dist_app.TOOL_TURNS)), "the fork's model answered without tools"

    # The same from the command line, as another process: it follows the fork on the workers.
    command = [
        sys.executable,
        "-c",
        "from lg_core.cli import main; main()",
        "runs",
        "fork",
        failed.id,
        "--from-step",
        "root/turn-2/model",
        "--model",
        "scripted:replay-alt",
        "--run-id",
        "cli-fork",
    ]
    result = subprocess.run(
        command, env=dist.env(LG_IMPORTS="dist_app,replay_dist_app"), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Forked after 5 messages.\n"
    assert f"forked run cli-fork from {failed.id} at step root/turn-2/model" in result.stderr
    assert store.load_run("cli-fork").status == "completed"
