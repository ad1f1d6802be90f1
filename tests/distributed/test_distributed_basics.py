"""A run enqueued from this process completes on real worker processes."""

from __future__ import annotations

from collections import Counter

import dist_app

from lg_core.errors import ToolLoopError


def test_a_run_completes_on_workers_and_streams_its_events(dist):
    dist.start_workers()
    execution = dist_app.StepAgent.start_execution("Record every step.")
    assert execution.state in ("running", "finished")

    events = list(execution.events())
    run = execution.wait(timeout=60)

    assert run.completed, run.error
    assert run.response == "All steps recorded."
    assert events[-1].type == "run_stop"
    durable = [e.seq for e in events if e.seq is not None]
    assert durable == sorted(set(durable)) and durable[0] == 1
    assert Counter(n for _tool, n, _key in dist.calls()) == Counter(range(dist_app.TURNS))
    assert [e.seq for e in run.events()] == list(range(1, len(run.events()) + 1))


def test_tool_loop_counts_follow_the_run_across_worker_processes(dist):
    """Each tool call may run in another process: the counts live in the checkpoint."""
    dist.start_workers()
    run = dist_app.LoopingAgent.start_execution("Refunds?").wait(timeout=60)

    assert run.failed and isinstance(run.error, ToolLoopError), run.error
    assert [tool for tool, _n, _key in dist.calls()] == ["same_answer"] * 4  # the fifth never ran
    results = [e for e in run.events() if e.type == "tool_execution_stop"]
    assert [e.data["output"] for e in results] == ["No entry."] * 4
