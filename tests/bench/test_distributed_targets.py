"""bench/distributed.py's verdicts, computed from made-up figures (no stack started).

A throughput deployment whose ideal is beyond its CPUs is a reference row,
never a PASS or a FAIL, and ``--strict`` does not count it; every other row is
judged against its target. The sized deployment's figure is its median round.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from distbench.measure import ThroughputResult, median_round  # noqa: E402
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
        "recovery": [{"victim": "pool child", "path": "same host", "seconds": [0.5], "lease_s": 15.0}],
        "memory": {"growth_pct": 0.2},
    }


def test_a_deployment_whose_ideal_is_beyond_its_cpus_is_a_reference_not_a_target() -> None:
    oversubscribed = throughput("defaults", ideal=426.7, achieved=46.0, ceiling=77.0)

    [row] = [t for t in targets(report(oversubscribed)) if "defaults" in t.name]

    assert cpu_bound(oversubscribed)
    assert row.reference and row.passed is None
    assert "427 runs/s > CPU-bound ceiling 77 runs/s" in row.goal


@pytest.mark.parametrize(("achieved", "passed"), [(33.0, True), (30.0, False)])
def test_a_deployment_within_its_cpus_is_judged_against_eighty_percent(achieved: float, passed: bool) -> None:
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


def _round(achieved: float) -> ThroughputResult:
    return ThroughputResult(
        label="sized",
        deployment="",
        runs=500,
        model_threads=4,
        model_turns_per_run=3,
        model_delay_s=0.05,
        ideal_runs_per_s=26.67,
        achieved_runs_per_s=achieved,
        overall_runs_per_s=achieved,
        submit_s=1.0,
        window_s=20.0,
        latency_median_s=1.0,
        latency_p95_s=2.0,
        machine_busy_pct=40.0,
        cpu_ms_per_run={},
        cpu_ceiling_runs_per_s=60.0,
        model_worker_busy_pct=20.0,
    )


def test_the_sized_deployment_reports_its_median_round_with_every_rounds_ratio() -> None:
    slow, middle, fast = _round(19.0), _round(21.8), _round(22.4)

    chosen = median_round([fast, slow, middle])

    assert chosen is middle  # a slow stretch in one round does not decide the figure, nor a lucky one
    assert chosen.round_ratios == [fast.ratio, slow.ratio, middle.ratio]  # in the order they ran


@pytest.mark.parametrize("count", [0, 2])
def test_a_median_round_needs_an_odd_number_of_rounds(count: int) -> None:
    with pytest.raises(ValueError, match="odd number of rounds"):
        median_round([_round(20.0) for _ in range(count)])
