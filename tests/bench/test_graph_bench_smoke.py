"""Smoke test of bench/graph_overhead.py: ``--quick --json`` runs end to end and reports every figure.

Only the shape of the report is checked, never a timing: timings depend on the machine.
"""

from __future__ import annotations

import json

from tests.bench.support import run_quick


def test_the_graph_benchmark_reports_the_node_and_fan_out_overheads(tmp_path):
    report = json.loads(run_quick("graph_overhead.py", tmp_path, "--json").stdout)

    assert set(report["median_ms"]) == {"graph", "agents", "agent_one_turn", "agent_tool_turns"}
    assert set(report["targets_met"]) == {"node", "fan_out"}
    assert len(report["ratios"]) == 2
