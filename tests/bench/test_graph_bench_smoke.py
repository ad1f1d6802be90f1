"""Smoke test of bench/graph_overhead.py: ``--quick --json`` runs end to end and reports every figure,
local and on workers.

Only the shape of the report is checked, never a timing: timings depend on the machine.
"""

from __future__ import annotations

import json

from tests.bench.support import run_quick


def test_the_graph_benchmark_reports_the_node_and_fan_out_overheads_locally_and_on_workers(tmp_path):
    report = json.loads(run_quick("graph_overhead.py", tmp_path, "--json").stdout)

    assert set(report["median_ms"]) == {"graph", "agents", "agent_one_turn", "agent_tool_turns"}
    assert set(report["targets_met"]) == {"node", "fan_out", "workers"}
    assert len(report["ratios"]) == 3
    assert set(report["on_workers"]) == {"wall_ms", "slowest_branch_ms", "ratio"}
