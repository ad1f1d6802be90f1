"""Smoke test of bench/engine_overhead.py: it runs end to end and reports every section.

Only the shape of the output is checked, never a timing or a PASS/FAIL verdict:
those depend on the machine (bench/README.md says how to read them).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.bench.support import run_quick

SECTIONS = (
    "Environment",
    "1. Floor A",
    "2. Floor B",
    "3. Engine per step",
    "4. Ratios and targets",
    "5. Bytes written per turn",
)
TARGETS = (
    "in-memory overhead per step",
    "row bytes, turn 500 / turn 10",
    "WAL bytes per turn",
)

pytestmark = pytest.mark.slow


def run_bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_quick("engine_overhead.py", tmp_path, *args)


def test_quick_run_prints_every_section(tmp_path: Path) -> None:
    out = run_bench(tmp_path).stdout

    for heading in SECTIONS:
        assert heading in out, f"section {heading!r} missing from:\n{out}"
    for row in ("Floor A", "Floor B", "Engine, in-memory store", "Engine, SQLite file store", "turn 10", "turn 500"):
        assert row in out
    verdicts = [line for line in out.splitlines() if "<=" in line and any(name in line for name in TARGETS)]
    assert len(verdicts) == len(TARGETS), verdicts
    for line in verdicts:
        assert "PASS" in line or "FAIL" in line or "N/A" in line, line
    assert "file-store overhead per step, in bare commits" in out, "the file store's cost in bare commits is missing"
    assert list(tmp_path.iterdir()) == [], "the benchmark left its SQLite files behind"


def test_quick_json_is_complete(tmp_path: Path) -> None:
    report = json.loads(run_bench(tmp_path, "--json").stdout)

    assert {"environment", "series", "overhead_ms", "ratios", "targets", "bytes_per_turn"} <= set(report)
    assert report["steps_per_run"] == 41
    assert set(report["series"]) == {"floor_a", "floor_b", "floor_b_shaped", "engine_memory", "engine_file"}
    for series in report["series"].values():
        assert series["median_ms"] > 0
    assert len(report["targets"]) == len(TARGETS)
    assert all(target["passed"] in (True, False, None) for target in report["targets"])
    per_turn = report["bytes_per_turn"]
    assert (per_turn["early_turn"], per_turn["late_turn"]) == (10, 500)
    assert per_turn["early"]["rows"] > 0 and per_turn["late"]["rows"] > 0
