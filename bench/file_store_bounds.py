#!/usr/bin/env python
"""Lower bounds of other step-commit designs: how low a store with one durable write per step could go.

    .venv/bin/python bench/file_store_bounds.py            # full run (~15 s)
    .venv/bin/python bench/file_store_bounds.py --quick    # smoke run
    .venv/bin/python bench/file_store_bounds.py --json     # machine-readable output

``engine_overhead.py`` measures the file store as it is. This benchmark asks
what a *different* store could reach on the same machine, by timing the same
41-step conversation with the step commit replaced by cheaper stand-ins. Each
stand-in leaves out work a real store must do, so its figure is a lower bound
for that design, never something the product can ship:

* **no store commit**: the engine's own bookkeeping, the step commit replaced
  by nothing (the in-memory store is still opened and the run created);
* **one journal row (FULL)**: the step commit replaced by one JSON row (the
  step's checkpoint, messages, events and new steps) inserted into a one-table
  SQLite WAL file and committed with ``synchronous=FULL``: the durable write of
  a "journal row per step" design, before deriving any queryable table from it;
* **file store at NORMAL**: today's schema without the per-step fsync (a WAL
  commit at ``synchronous=NORMAL`` survives a killed process but not a power
  loss): the floor of today's schema if the durable write cost nothing.

Every figure is printed as the file store's cost is in ``engine_overhead.py``:
(per step - floor A) / floor B, the overhead per step in bare commits. The rounds
are interleaved and the median reported, as in ``engine_overhead.py``, whose
workload, floors and warm-up this reuses.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_overhead import (
    SHORT_MODEL,
    STEPS_PER_RUN,
    TURNS,
    BareCommit,
    Series,
    ask_runs,
    conversation,
    floor_a_conversation,
    repeat,
    timed,
    warm_until_wal_wraps,
)
from rich.console import Console
from rich.table import Table

from lg_core import Configuration
from lg_core.providers import scripted
from lg_core.providers.scripted import ScriptedProvider
from lg_core.store.records import CommitResult, StepCommit, dumps
from lg_core.store.repository import RunStore


@dataclass(frozen=True)
class Plan:
    """How much to measure: per round, each batch is timed once."""

    rounds: int
    floor_a_runs: int
    engine_runs: int  # Agent.ask runs per batch, per variant
    commits: int  # bare commits per batch


FULL = Plan(rounds=15, floor_a_runs=20, engine_runs=6, commits=200)
QUICK = Plan(rounds=3, floor_a_runs=5, engine_runs=2, commits=40)


class JournalRow:
    """A stand-in step commit: the step as one JSON row in a one-table SQLite file.

    It returns what :meth:`RunStore.commit` returns for an applied commit, with
    the events numbered from a per-run counter, so the engine goes on as usual.
    """

    def __init__(self, path: Path | None) -> None:
        self.connection = None if path is None else self._open(path)
        self.wal = None if path is None else Path(f"{path}-wal")
        self.last_seq: dict[str, int] = {}

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute(
            "CREATE TABLE IF NOT EXISTS journal (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, body TEXT NOT NULL)"
        )
        return connection

    def commit(self, commit: StepCommit) -> CommitResult:
        last = self.last_seq.get(commit.run_id, 1) + len(commit.events)  # the run's creation wrote seq 1
        self.last_seq[commit.run_id] = last
        if self.connection is not None:
            body = dumps(
                {
                    "step": commit.step_key,
                    "result": commit.step_result,
                    "checkpoint": commit.checkpoint,
                    "messages": [(seq, message.stored_form()) for seq, message in commit.messages],
                    "events": commit.events,
                    "new_steps": [(step.key, step.kind) for step in commit.new_steps],
                }
            )
            self.connection.execute("BEGIN IMMEDIATE")
            self.connection.execute("INSERT INTO journal (run_id, body) VALUES (?, ?)", (commit.run_id, body))
            self.connection.execute("COMMIT")
        return CommitResult(True, None, last - len(commit.events) + 1, False, (), 0)

    def rows(self) -> int:
        assert self.connection is not None
        return int(self.connection.execute("SELECT count(*) FROM journal").fetchone()[0])

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


@contextmanager
def step_commit_replaced_by(journal: JournalRow) -> Iterator[None]:
    """Route every RunStore.commit to ``journal`` while the block runs."""
    original = RunStore.commit

    def commit(_store: RunStore, commit: StepCommit, now: float | None = None) -> CommitResult:
        return journal.commit(commit)

    RunStore.commit = commit  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        RunStore.commit = original  # type: ignore[method-assign]


def asks_with(journal: JournalRow, configuration: Configuration, runs: int) -> Callable[[], None]:
    def batch() -> None:
        with step_commit_replaced_by(journal):
            ask_runs(configuration, runs)

    return batch


VARIANTS = {
    "engine_memory": "Engine, in-memory store (as shipped)",
    "engine_file": "Engine, SQLite file store at FULL (as shipped)",
    "no_commit": "Bound: no store commit",
    "journal_row": "Bound: one journal row per step (FULL)",
    "file_normal": "Bound: file store at NORMAL (no per-step fsync)",
}


def check_journal(journal: JournalRow, memory: Configuration) -> None:
    """One run through the journal stand-in completes and journals exactly one row per step."""
    before = journal.rows()
    asks_with(journal, memory, 1)()
    if journal.rows() - before != STEPS_PER_RUN:
        raise RuntimeError(f"expected {STEPS_PER_RUN} journal rows per run, found {journal.rows() - before}")


def measure(plan: Plan, workdir: Path) -> dict[str, Series]:
    memory = Configuration(run_store="sqlite://")
    file_full = Configuration(run_store=f"sqlite:///{workdir / 'full.db'}", sqlite_synchronous="FULL")
    file_normal = Configuration(run_store=f"sqlite:///{workdir / 'normal.db'}", sqlite_synchronous="NORMAL")
    bare = BareCommit(workdir / "bare.db", "FULL")
    nothing, journal = JournalRow(None), JournalRow(workdir / "journal.db")
    provider = ScriptedProvider("scripted")
    per_step = plan.engine_runs * STEPS_PER_RUN
    series = {
        "floor_a": Series("Floor A: plain loop", "step", plan.floor_a_runs * STEPS_PER_RUN, []),
        "floor_b": Series("Floor B: bare commit (FULL)", "commit", plan.commits, []),
        **{name: Series(label, "step", per_step, []) for name, label in VARIANTS.items()},
    }
    batches: dict[str, Callable[[], Any]] = {
        "floor_a": lambda: repeat(lambda: floor_a_conversation(provider), plan.floor_a_runs),
        "floor_b": lambda: repeat(bare.commit, plan.commits),
        "engine_memory": lambda: ask_runs(memory, plan.engine_runs),
        "engine_file": lambda: ask_runs(file_full, plan.engine_runs),
        "no_commit": asks_with(nothing, memory, plan.engine_runs),
        "journal_row": asks_with(journal, memory, plan.engine_runs),
        "file_normal": lambda: ask_runs(file_normal, plan.engine_runs),
    }
    scripted.register(SHORT_MODEL, conversation(TURNS))
    try:
        check_journal(journal, memory)
        # Every WAL at its working size first, as in engine_overhead.py: a long-lived store's state.
        warm_until_wal_wraps(bare.commit, bare.wal, bare.wal_working_size, limit=20_000)
        warm_until_wal_wraps(lambda: ask_runs(file_full, 1), workdir / "full.db-wal", bare.wal_working_size, limit=200)
        warm_until_wal_wraps(
            lambda: ask_runs(file_normal, 1), workdir / "normal.db-wal", bare.wal_working_size, limit=200
        )
        assert journal.wal is not None
        warm_until_wal_wraps(asks_with(journal, memory, 1), journal.wal, bare.wal_working_size, limit=400)
        for name in ("floor_a", "engine_memory", "no_commit"):
            batches[name]()
        names = list(batches)
        for round_index in range(plan.rounds):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                series[name].samples.append(timed(batches[name]) / series[name].per_batch)
    finally:
        scripted.unregister(SHORT_MODEL)
        for closable in (bare, journal, memory, file_full, file_normal):
            closable.close()
    return series


def report_of(series: dict[str, Series]) -> dict[str, Any]:
    floor_a, floor_b = series["floor_a"].median, series["floor_b"].median
    rows = []
    for name in VARIANTS:
        overhead = series[name].median - floor_a
        ratio = overhead / floor_b
        rows.append(
            {
                "name": name,
                "label": VARIANTS[name],
                "per_step_ms": series[name].median * 1e3,
                "overhead_ms": overhead * 1e3,
                "bare_commits": ratio,
            }
        )
    return {
        "series": {name: {"name": s.name, **s.to_dict()} for name, s in series.items()},
        "variants": rows,
    }


def print_report(console: Console, report: dict[str, Any]) -> None:
    console.rule("[bold]Floors and variants (median of interleaved rounds)")
    table = Table(show_header=True, header_style="bold")
    for column in ("measurement", "per", "median ms", "min ms", "max ms"):
        table.add_column(column, justify="left" if column == "measurement" else "right")
    for data in report["series"].values():
        table.add_row(
            data["name"], data["unit"], f"{data['median_ms']:.4f}", f"{data['min_ms']:.4f}", f"{data['max_ms']:.4f}"
        )
    console.print(table)

    console.rule("[bold]Overhead per step in bare commits (floor B)")
    table = Table(show_header=True, header_style="bold")
    for column in ("variant", "overhead ms", "bare commits"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for row in report["variants"]:
        table.add_row(row["label"], f"{row['overhead_ms']:.4f}", f"{row['bare_commits']:.2f}")
    console.print(table)
    console.print(
        "Bounds leave out work their design must still do (deriving queryable tables from a journal row; a durable "
        "write for NORMAL), so a real store of that design lands above its bound."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Lower bounds of the file-store overhead for cheaper step-commit designs."
    )
    parser.add_argument("--quick", action="store_true", help="a fast smoke run: fewer rounds and smaller batches")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--dir", type=Path, help="where to put the SQLite files (default: a new temporary directory)")
    args = parser.parse_args(argv)
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="lg-bounds-", dir=args.dir))
    try:
        report = report_of(measure(QUICK if args.quick else FULL, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(Console(width=None if sys.stdout.isatty() else 140), report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
