#!/usr/bin/env python
"""Managed subagents on workers: a parent's children run at once, and a waiting parent holds no thread.

    .venv/bin/python bench/subagents.py            # full run (~40 s)
    .venv/bin/python bench/subagents.py --quick    # smoke run (~20 s)
    .venv/bin/python bench/subagents.py --json     # machine-readable output

A parent Agent spawns 4 research subagents in one model response and waits for them;
each child's model waits 1 s (``distbench.subagents_app``). On a PostgreSQL store and
Redis this script starts, with 2 worker processes (every queue, 4 threads each):

1. the run's wall time against its slowest child run's, target <= 1.3x (the children's
   turns run at once, and each ending wakes the parked wait at once);
2. the parent's steps held by a worker while its children run, sampled from the store
   every 20 ms: a wait parks (status ``waiting``, no holder) instead of blocking a
   thread, so the median is 0, target 0 (a sample may catch a step between its
   claim and its parking commit, which is why the maximum is only reported).

Rounds are measured one after another and the median is reported; the exit status is
0 whatever the timings are (``--strict`` makes a missed target exit 1). See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

from distbench.stack import BenchStack
from distbench.subagents_app import BenchDelegatingAgent

from lg_core import with_configuration

WALL_TARGET_RATIO = 1.3
WORKER_PROCESSES = 2
SAMPLE_SECONDS = 0.02


def _held_while_children_run(store: Any, run_id: str, stop: threading.Event, held: list[int]) -> None:
    """Sample how many of the parent's steps a worker holds while any child run is running."""
    while not stop.is_set():
        try:
            children = store.list_child_runs(run_id)
            if any(child.status == "running" for child in children):
                held.append(sum(1 for step in store.load_steps(run_id) if step.status == "running"))
        except Exception:  # noqa: BLE001 - the run may not be stored yet
            pass
        time.sleep(SAMPLE_SECONDS)


def measure(rounds: int) -> dict[str, Any]:
    stack = BenchStack(lease_seconds=10.0).start()
    configuration = stack.configuration()
    walls: list[float] = []
    slowest: list[float] = []
    held: list[int] = []
    try:
        with with_configuration(configuration):
            store = configuration.runtime().store  # creates the schema before any worker opens the store
            for _ in range(WORKER_PROCESSES):
                stack.start_workers(("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=4)
            for round_number in range(rounds + 1):  # the first round warms the workers up and is dropped
                started = time.perf_counter()
                execution = BenchDelegatingAgent.start_execution("Go")
                stop, samples = threading.Event(), list[int]()
                sampler = threading.Thread(
                    target=_held_while_children_run, args=(store, execution.run_id, stop, samples), daemon=True
                )
                sampler.start()
                run = execution.wait(timeout=120)
                walls.append(time.perf_counter() - started)
                stop.set()
                sampler.join()
                if not run.completed:
                    raise SystemExit(f"a benchmark run did not complete: {run.outcome} {run.error}")
                children = store.list_child_runs(execution.run_id)
                slowest.append(max((c.finished_at or c.updated_at) - c.created_at for c in children))
                if round_number:
                    held.extend(samples)
    finally:
        configuration.close()
        stack.close()
    ratios = [wall / child for wall, child in zip(walls[1:], slowest[1:], strict=True)]
    return {
        "wall_ms": statistics.median(walls[1:]) * 1000,
        "slowest_child_ms": statistics.median(slowest[1:]) * 1000,
        "ratio": statistics.median(ratios),
        "held_median": statistics.median(held) if held else 0,
        "held_max": max(held) if held else 0,
        "samples": len(held),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run: fewer rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--rounds", type=int, help="override the number of measured rounds")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    options = parser.parse_args(argv)
    rounds = options.rounds or (2 if options.quick else 5)
    result = measure(rounds)
    passed = {
        "wall": result["ratio"] <= WALL_TARGET_RATIO,
        "held": result["held_median"] == 0,
    }
    if options.json:
        print(json.dumps({**result, "passed": passed}, indent=2))
    else:
        mark = {True: "PASS", False: "FAIL"}
        print(f"Managed subagents on {WORKER_PROCESSES} worker processes, 4 children of 1 s, {rounds} rounds")
        print(
            f"  wall {result['wall_ms']:.0f} ms vs slowest child {result['slowest_child_ms']:.0f} ms: "
            f"{result['ratio']:.2f}x (target <= {WALL_TARGET_RATIO}x) {mark[passed['wall']]}"
        )
        print(
            f"  parent steps held by a worker while children run: median {result['held_median']}, "
            f"max {result['held_max']} over {result['samples']} samples (target: median 0) {mark[passed['held']]}"
        )
    return 1 if options.strict and not all(passed.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
