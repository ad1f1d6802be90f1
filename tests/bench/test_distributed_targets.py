"""bench/distributed.py's verdicts, computed from made-up figures (no stack started).

A throughput deployment whose ideal is beyond its CPUs is a reference row,
never a PASS or a FAIL, and ``--strict`` does not count it; every other row is
judged against its target.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from distbench.report import cpu_bound, targets  # noqa: E402


def throughput(label: str, *, ideal: float, achieved: float, ceiling: float) -> dict[str, Any]:
    return {
        "label": label,
        "model_threads": 6,
        "ideal_runs_per_s": ideal,
        "achieved_runs_per_s": achieved,
        "cpu_ceiling_runs_per_s": ceiling,
        "ratio": achieved / ideal,
    }


def report(*rows: dict[str, Any]) -> dict[str, Any]:
    return {
        "step_cost": {"median_wall_ms": 3.0},
        "floor": {"median_ms": 3.0},
        "throughput": list(rows),
        "recovery": [
            {"victim": "pool child", "path": "same host", "seconds": [0.5], "lease_s": 15.0}
        ],
        "memory": {"growth_pct": 0.2},
    }


def test_a_deployment_whose_ideal_is_beyond_its_cpus_is_a_reference_not_a_target() -> None:
    oversubscribed = throughput("defaults", ideal=426.7, achieved=46.0, ceiling=77.0)

    [row] = [t for t in targets(report(oversubscribed)) if "defaults" in t.name]

    assert cpu_bound(oversubscribed)
    assert row.reference and row.passed is None
    assert "427 runs/s > CPU-bound ceiling 77 runs/s" in row.goal


@pytest.mark.parametrize(("achieved", "passed"), [(33.0, True), (30.0, False)])
def test_a_deployment_within_its_cpus_is_judged_against_eighty_percent(
    achieved: float, passed: bool
) -> None:
    sized = throughput("sized", ideal=40.0, achieved=achieved, ceiling=77.0)

    [row] = [t for t in targets(report(sized)) if "sized" in t.name]

    assert not cpu_bound(sized)
    assert row.passed is passed and not row.reference


def test_strict_counts_only_the_rows_that_are_targets() -> None:
    rows = targets(
        report(
            throughput("defaults", ideal=426.7, achieved=46.0, ceiling=77.0),
            throughput("sized", ideal=40.0, achieved=33.0, ceiling=77.0),
        )
    )

    assert not any(t.passed is False for t in rows)
