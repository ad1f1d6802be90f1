"""Smoke test of bench/file_store_bounds.py: every variant runs its conversations to the end.

Only the shape of the report is checked, never a timing: the figures depend on
the machine (bench/README.md says how to read them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.support import BENCH_DIR, run_quick

VARIANTS = {"engine_memory", "engine_file", "no_commit", "journal_row", "file_normal"}

pytestmark = pytest.mark.slow


def run_bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_quick("file_store_bounds.py", tmp_path, *args)


def test_quick_json_reports_every_variant(tmp_path: Path) -> None:
    report = json.loads(run_bench(tmp_path, "--json").stdout)

    assert set(report["series"]) == {"floor_a", "floor_b", *VARIANTS}
    assert all(series["median_ms"] > 0 for series in report["series"].values())
    assert {row["name"] for row in report["variants"]} == VARIANTS
    for row in report["variants"]:
        assert row["bare_commits"] == pytest.approx(row["overhead_ms"] / report["series"]["floor_b"]["median_ms"])
    assert list(tmp_path.iterdir()) == [], "the benchmark left its SQLite files behind"


def test_quick_tables_name_every_variant(tmp_path: Path) -> None:
    out = run_bench(tmp_path).stdout

    assert "Overhead per step in bare commits (floor B)" in out
    for label in (
        "Floor A",
        "Floor B",
        "Bound: no store commit",
        "Bound: one journal row per step (FULL)",
        "Bound: file store at NORMAL",
    ):
        assert label in out, f"{label!r} missing from:\n{out}"


def test_the_stand_in_commit_is_put_back(tmp_path: Path) -> None:
    """The module's context manager restores RunStore.commit, also when the block raises."""
    sys.path.insert(0, str(BENCH_DIR))
    try:
        import file_store_bounds as bounds
    finally:
        sys.path.remove(str(BENCH_DIR))
    from lg_core.store.repository import RunStore

    original = RunStore.commit
    with pytest.raises(RuntimeError), bounds.step_commit_replaced_by(bounds.JournalRow(None)):
        assert RunStore.commit is not original
        raise RuntimeError("inside")
    assert RunStore.commit is original
