"""Smoke test of bench/distributed.py: ``--quick`` runs end to end and reports every section.

Only the shape of the report is checked, never a timing or a PASS/FAIL verdict:
those depend on the machine (bench/README.md says how to read them). The
benchmark starts its own PostgreSQL, Redis, workers and schedulers, so this
test needs the same system programs as tests/distributed. One run (about 80 s
on 2 CPUs) prints the tables and writes the JSON document, and both are checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.support import bench_env

BENCH = Path(__file__).resolve().parents[2] / "bench" / "distributed.py"
# Run under bench_env(), the tree under test first on PYTHONPATH: without it the script imported
# the installed lg_core (another clone's), whose newer schema its workers (this tree) refused,
# and it then waited for runs that never ran.
SECTIONS = (
    "Environment",
    "1. Raw floor",
    "2. Per-step cost",
    "3. Throughput",
    "4. Recovery",
    "5. Worker memory",
    "Targets",
)
TARGETS = (
    "per step / raw floor per hop",
    "throughput achieved / ideal, lg worker defaults",
    "throughput achieved / ideal, model threads sized to the CPU",
    "SIGKILL pool child -> next commit, same host",
    "SIGKILL whole worker -> next commit, same host",
    "SIGKILL pool child -> next commit, lease expiry",
    "SIGKILL whole worker -> next commit, lease expiry",
    "worker RSS growth after warm-up",
)

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[str, dict]:
    path = tmp_path_factory.mktemp("bench") / "report.json"
    result = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json-file", str(path)],
        capture_output=True,
        text=True,
        env=bench_env(),
        timeout=420,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout, json.loads(path.read_text())


def test_every_section_and_target_is_printed(quick_run) -> None:
    out, _report = quick_run

    for heading in SECTIONS:
        assert heading in out, f"section {heading!r} missing from:\n{out}"
    fsync_row = next(line for line in out.splitlines() if "postgresql fsync" in line)
    assert "on" in fsync_row.split("postgresql fsync", 1)[1], fsync_row
    for row in ("median", "Protocol floor / raw floor", "ideal, concurrency-bound", "Celery alone", "RSS MiB"):
        assert row in out, row
    targets = out.split("Targets")[-1]
    for name in TARGETS:
        [line] = [line for line in targets.splitlines() if name in line]
        assert any(verdict in line for verdict in ("PASS", "FAIL", "N/A", "REF")), line


def test_the_json_document_is_complete(quick_run) -> None:
    _out, report = quick_run

    assert report["environment"]["postgresql fsync"] == "on"
    assert report["floor"]["median_ms"] > 0
    assert report["protocol_floor"]["median_ms"] > 0 and len(report["protocol_floor"]["per_chain_ms"]) >= 1
    assert report["step_cost"]["steps_per_run"] == 41 and len(report["step_cost"]["wall_ms"]) >= 1
    assert [r["label"] for r in report["throughput"]] == [
        "lg worker defaults",
        "model threads sized to the CPU",
    ]
    for result in report["throughput"]:
        assert result["achieved_runs_per_s"] > 0 and result["celery_only"]["tasks_per_s"] > 0
    assert sorted((r["victim"], r["path"]) for r in report["recovery"]) == sorted(
        (victim, path) for victim in ("pool child", "whole worker") for path in ("same host", "lease expiry")
    )
    assert all(r["seconds"] for r in report["recovery"])
    assert len(report["memory"]["samples"]) >= 2
    assert len(report["targets"]) == len(TARGETS)
    for name, target in zip(TARGETS, report["targets"], strict=True):
        assert target["name"].startswith(name) and target["passed"] in (True, False, None)
