"""Smoke test of bench/code_mode.py: ``--quick --json`` runs end to end on bwrap and reports every figure.

Only the shape of the report is checked, never a timing: the figures depend on the machine.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.bench.support import BENCH_DIR, bench_env
from tests.sandbox.conftest import requires_bwrap

pytestmark = [pytest.mark.slow, requires_bwrap]

FIGURES = {
    "exec_seconds",
    "bare_sandbox_python_seconds",
    "exec_ratio",
    "brokered_call_ms",
    "direct_call_ms",
    "broker_overhead_ms",
    "session_brokered_call_ms",
    "session_broker_overhead_ms",
}


def test_quick_json_reports_every_figure() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH_DIR / "code_mode.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        env=bench_env(),
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == FIGURES
    assert all(report[name] > 0 for name in ("exec_seconds", "bare_sandbox_python_seconds", "direct_call_ms"))
    # The brokered figures are differences of medians (runs with and without calls): on a loaded
    # machine a quick run's noise can exceed them, so they are only required to be numbers.
    assert all(math.isfinite(value) for value in report.values())
