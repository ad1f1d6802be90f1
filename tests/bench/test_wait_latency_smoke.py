"""Smoke test of bench/wait_latency.py: the in-process mode reports wait() next to events() for the
same runs. Only the report's shape is checked, never a timing: those depend on the machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.support import run_quick

pytestmark = pytest.mark.slow


def test_quick_local_json_reports_both_latencies_and_their_ratio(tmp_path: Path) -> None:
    report = json.loads(run_quick("wait_latency.py", tmp_path, "--local", "--json").stdout)

    assert list(report) == ["in-process"]
    row = report["in-process"]
    assert row["runs"] == 5
    assert row["events_s"] > 0 and row["wait_s"] > 0
    assert row["ratio"] == pytest.approx(row["wait_s"] / row["events_s"])
