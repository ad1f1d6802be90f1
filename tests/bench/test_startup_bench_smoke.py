"""Smoke test of bench/startup.py: ``--quick --json`` runs end to end and reports every figure.

Only the shape of the report is checked, never a timing or a verdict: those
depend on the machine (bench/README.md says how to read them). The benchmark
starts its own PostgreSQL, Redis, workers and scheduler, so this test needs
the same system programs as tests/distributed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.support import bench_env

BENCH = Path(__file__).resolve().parents[2] / "bench" / "startup.py"
SERIES = {"samples", "median", "min", "max"}
TARGETS = (
    "import lg_core / import sqlalchemy, pydantic, httpx",
    "lg worker restart -> first committed step / bare Celery worker start -> ready",
    "idle lg worker RSS per process / bare Celery worker's",
)

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.fixture(scope="module")
def report() -> dict:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json"],
        capture_output=True,
        text=True,
        env=bench_env(),
        timeout=420,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return json.loads(result.stdout)


def _is_series(data: dict, rounds: int) -> bool:
    return set(data) == SERIES and len(data["samples"]) == rounds and data["min"] <= data["median"] <= data["max"]


def test_every_import_is_measured_against_its_floor(report: dict) -> None:
    imports = report["imports"]

    assert set(imports) == {"lg_core", "floor", "agent", "bare"}
    assert all(_is_series(data, 3) for data in imports.values())
    assert report["environment"]["lg_core imported from"].endswith("lg_core/__init__.py")


def test_every_worker_figure_has_a_sample_per_round(report: dict) -> None:
    start, memory = report["workers"]["start"], report["workers"]["memory"]

    assert set(start) == {
        "bare_ready_s",
        "lg_restart_s",
        "lg_restart_tools_ready_s",
        "lg_restart_ready_to_commit_s",
        "lg_ready_s",
        "lg_redispatch_s",
        "lg_queued_s",
    }
    assert all(_is_series(data, 2) for data in start.values())
    assert report["workers"]["redispatches_lost"] in (0, 1, 2)
    for side in ("lg", "bare"):
        figures = memory[side]
        assert all(_is_series(figures[name], 2) for name in ("processes", "per_process_mib", "total_mib"))
        assert [len(each) for each in figures["each_mib"]] == [int(n) for n in figures["processes"]["samples"]]
    assert memory["bare"]["processes"]["median"] == 3  # a prefork parent and its two children


def test_each_target_has_a_verdict(report: dict) -> None:
    assert [row["name"] for row in report["targets"]] == list(TARGETS)
    assert [row["goal"] for row in report["targets"]] == ["<= 1.3x", "<= 1.2x", "<= 1.5x"]
    assert all(row["value"] > 0 and row["passed"] in (True, False) for row in report["targets"])
    assert report["quick"] is True
