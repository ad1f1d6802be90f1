"""Smoke test of bench/stream_accumulation.py: every path streams its answers whole and is reported.

Only the shape of the report is checked, never a timing or a PASS/FAIL verdict:
those depend on the machine (bench/README.md says how to read them).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.bench.support import run_quick

PATHS = (
    "Floor: scripted stream, plain loop",
    "Engine: Agent.ask, SQLite file store",
    "Reader: OpenAI chunks, text",
    "Reader: OpenAI chunks, tool-call arguments",
    "Reader: OpenRouter chunks, reasoning details",
    "Reader: Anthropic events, text",
    "Reader: Anthropic events, tool-call arguments",
    "Reader: Gemini chunks, text",
)

pytestmark = pytest.mark.slow


def run_bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_quick("stream_accumulation.py", tmp_path, *args)


def test_quick_json_reports_every_path_at_every_size(tmp_path: Path) -> None:
    report = json.loads(run_bench(tmp_path, "--json").stdout)

    assert [row["name"] for row in report["paths"]] == list(PATHS)
    for row in report["paths"]:
        assert list(row["cpu_s_per_mb"]) == ["64 KB", "256 KB", "1 MB"]
        assert all(value > 0 for value in row["cpu_s_per_mb"].values())
        assert row["ratio"] == pytest.approx(row["cpu_s_per_mb"]["1 MB"] / row["cpu_s_per_mb"]["64 KB"])
    assert len(report["engine_over_floor"]) == 3
    assert len(report["targets"]) == len(PATHS)
    for target in report["targets"]:
        assert target["target"] == "<= 1.5"
        assert target["passed"] is (target["value"] <= 1.5)
    assert list(tmp_path.iterdir()) == [], "the benchmark left its SQLite file behind"


def test_quick_tables_print_a_verdict_per_path(tmp_path: Path) -> None:
    out = run_bench(tmp_path).stdout

    for heading in ("Environment", "CPU seconds per MB of streamed answer", "Engine / floor, per MB", "4. Targets"):
        assert heading in out, f"{heading!r} missing from:\n{out}"
    verdicts = [line for line in out.splitlines() if "CPU s per MB, 1 MB / 64 KB" in line and "<= 1.5" in line]
    assert len(verdicts) == len(PATHS), verdicts
    assert all("PASS" in line or "FAIL" in line for line in verdicts)
