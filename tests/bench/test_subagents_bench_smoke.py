"""Smoke test of bench/subagents.py: ``--quick --json`` runs a parent with 4 children on 2 worker
processes end to end and reports both figures.

Only the shape of the report is checked, never a timing: timings depend on the machine.
"""

from __future__ import annotations

import json

from tests.bench.support import run_quick


def test_the_subagents_benchmark_reports_the_wall_ratio_and_the_threads_held_while_parents_wait(tmp_path):
    report = json.loads(run_quick("subagents.py", tmp_path, "--json").stdout)

    assert {"wall_ms", "slowest_child_ms", "ratio", "held_median", "held_max", "samples"} <= set(report)
    assert set(report["passed"]) == {"wall", "held"}
    assert report["samples"] > 0
