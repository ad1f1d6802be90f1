"""Smoke test of bench/subagents.py: ``--quick --json`` runs a parent with 4 children on 2 worker
processes end to end and reports both figures.

Only the shape of the report is checked, never a timing: timings depend on the machine. The script
keeps its PostgreSQL, Redis and worker files in a directory of its own (distbench.stack.BenchStack),
so it takes no ``--dir``.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.bench.support import BENCH_DIR, bench_env


def test_the_subagents_benchmark_reports_the_wall_ratio_and_the_threads_held_while_parents_wait():
    result = subprocess.run(
        [sys.executable, str(BENCH_DIR / "subagents.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        env=bench_env(),
        timeout=240,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    report = json.loads(result.stdout)

    assert {"wall_ms", "slowest_child_ms", "ratio", "held_median", "held_max", "samples"} <= set(report)
    assert set(report["passed"]) == {"wall", "held"}
    assert report["samples"] > 0
