"""Built-in tools on real Celery workers: each tool call opens the run's workspace and sandbox on
whichever worker takes it, and the run's files carry from one step to the next in its root."""

from __future__ import annotations

import json

import dist_app
import pytest

from tests.sandbox.conftest import requires_bwrap

pytestmark = [pytest.mark.slow, requires_bwrap]


def test_a_run_edits_its_files_across_steps_on_two_worker_processes(dist, tmp_path):
    root = tmp_path / "runs"
    settings = {
        "LG_WORKSPACE": json.dumps({"root": f"{root}/{{run_id}}"}),
        "LG_SANDBOX": json.dumps({"provider": "bubblewrap", "files": {"root": "read_write"}, "network": "none"}),
    }
    dist.start_workers(pool="threads", concurrency=2, **settings)
    dist.start_workers(pool="threads", concurrency=2, **settings)

    run = dist_app.FilesAgent.start_execution("Write notes").wait(timeout=120)

    assert run.outcome == "completed", run.error
    stops = {e.data["id"]: e.data for e in run.events() if e.type == "tool_execution_stop"}
    assert stops["w"]["output"] == "Wrote 6 bytes to notes/a.md."
    assert stops["r"]["output"] == "Replaced 1 occurrence in notes/a.md."
    assert json.loads(stops["s"]["output"])["stdout"] == "second\n"
    assert (root / run.id / "notes" / "a.md").read_text() == "second\n"
