#!/usr/bin/env python
"""How soon ``Execution.wait()`` returns after a run ends, next to a reader of ``events()``.

    .venv/bin/python bench/wait_latency.py            # in-process and on real workers (~1 minute)
    .venv/bin/python bench/wait_latency.py --quick    # fewer runs (~30 s)
    .venv/bin/python bench/wait_latency.py --local    # in-process only (no Redis, PostgreSQL, workers)
    .venv/bin/python bench/wait_latency.py --json     # one JSON document instead of a table

For each run, two readers start together on a handle of their own: one follows
``events()`` until the terminal event, the other blocks in ``wait()``. Each
records the seconds from ``start_execution`` to its return; the report gives the
medians and their ratio, wait / events, in the same runs: 1.0 means wait returns
when the terminal event is seen, a poll of the store would add its interval.
The workload is bench/distbench's ChainAgent (41 steps, a zero-latency model).
``in-process`` runs on threads of this process with a SQLite file store;
``workers`` starts PostgreSQL, Redis and Celery workers as bench/distributed.py
does. The exit status is 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the distbench helpers

from distbench.app import ChainAgent  # noqa: E402

from lg_core import Configuration, get_execution, with_configuration  # noqa: E402
from lg_workers.queues import MODEL, ORCHESTRATE, TOOLS  # noqa: E402


def timed_run(agent: Any) -> tuple[float, float]:
    """Seconds from start_execution to the terminal event read from ``events()``, and to ``wait()``'s return."""
    started = time.perf_counter()
    run_id = agent.start_execution("Record every step.").run_id
    follower, waiter = get_execution(run_id), get_execution(run_id)
    seen: list[float] = []

    def follow() -> None:
        for event in follower.events():
            if event.terminal:
                seen.append(time.perf_counter() - started)
                return

    thread = threading.Thread(target=follow)
    thread.start()
    run = waiter.wait(timeout=120)
    waited = time.perf_counter() - started
    thread.join(120)
    if not run.completed or not seen:
        raise RuntimeError(f"run {run_id} ended {run.outcome} (terminal event seen: {bool(seen)})")
    return seen[0], waited


def measure(configuration: Configuration, runs: int) -> dict[str, Any]:
    with with_configuration(configuration):
        timed_run(ChainAgent)  # warm-up: imports, the schema, connections
        pairs = [timed_run(ChainAgent) for _ in range(runs)]
    events = statistics.median(follow for follow, _wait in pairs)
    wait = statistics.median(waited for _follow, waited in pairs)
    extra = statistics.median((waited - follow) * 1000 for follow, waited in pairs)
    return {"runs": runs, "events_s": events, "wait_s": wait, "wait_after_events_ms": extra, "ratio": wait / events}


def measure_in_process(folder: Path, runs: int) -> dict[str, Any]:
    configuration = Configuration(run_store=f"sqlite:///{folder / 'runs.db'}")
    try:
        return measure(configuration, runs)
    finally:
        configuration.close()


def measure_on_workers(runs: int) -> dict[str, Any]:
    from distbench.stack import BenchStack

    stack = BenchStack(lease_seconds=5.0).start()
    try:
        stack.start_workers((ORCHESTRATE, MODEL, TOOLS), pool="threads", concurrency=8)
        configuration = stack.configuration()
        try:
            return measure(configuration, runs)
        finally:
            configuration.close()
    finally:
        stack.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--local", action="store_true", help="in-process only")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per mode")
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite store goes")
    options = parser.parse_args()
    runs = options.runs or (5 if options.quick else 20)
    folder = options.dir or Path(tempfile.mkdtemp(prefix="lg-bench-wait-"))
    report = {"in-process": measure_in_process(folder, runs)}
    if not options.local:
        report["workers"] = measure_on_workers(runs)
    if options.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{'mode':<12} {'runs':>5} {'events() s':>11} {'wait() s':>9} {'wait later ms':>14} {'wait/events':>12}")
    for mode, row in report.items():
        print(
            f"{mode:<12} {row['runs']:>5} {row['events_s']:>11.3f} {row['wait_s']:>9.3f} "
            f"{row['wait_after_events_ms']:>14.1f} {row['ratio']:>12.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
