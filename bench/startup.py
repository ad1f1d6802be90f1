#!/usr/bin/env python
"""How fast LittleGhost starts and how much an idle worker holds, each against a floor measured in the same run.

    .venv/bin/python bench/startup.py            # full run (about 4 minutes on 2 CPUs)
    .venv/bin/python bench/startup.py --quick    # smoke run (about a minute)
    .venv/bin/python bench/startup.py --json     # one JSON document instead of tables

1. Import: the wall time of ``python -c "import lg_core"`` minus that of
   ``python -c pass``, against ``python -c "import sqlalchemy, pydantic, httpx"``
   minus the same. Target <= 1.3x. ``import lg_core`` loads its public names on first use,
   so ``from lg_core import Agent, Tool`` (what an application's agent module pays) is
   printed beside it as a reference.
2. Restart: an ``lg worker`` (default queues) is SIGKILLed, with every process
   under it, in the middle of a run's tool call; once ``lg scheduler`` has
   re-dispatched the step (it sees at once that the holder on this host is
   dead) and the step's message waits in lg.tools, a new ``lg worker`` is
   started, and the time from starting it to the run's next committed step
   (the store's timestamp) is set against a bare Celery worker's start to
   ready (its " ready." log line). Target <= 1.2x.
3. Idle memory: RSS per process of an ``lg worker`` (default queues: the
   command, its Celery workers and their pool children) after it is ready and
   has settled, against a bare Celery worker's (prefork, concurrency 2).
   Target <= 1.5x. Totals and process counts are printed too.

The bare Celery worker is ``distbench/bare_app.py``: lg_workers' broker
settings and one task, importing nothing of LittleGhost. Every measurement is
interleaved with its floor round by round (the order alternates), and the
median round is reported with min and max. The exit status is 0 whatever the
figures are (``--strict`` exits 1 on a missed target). See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the distbench helpers

from distbench import app as bench_app  # noqa: E402
from distbench.bare_app import check_settings  # noqa: E402
from distbench.measure import BenchError, progress, wait_hanging  # noqa: E402
from distbench.probes import StoreProbe, process_tree, rss_bytes  # noqa: E402
from distbench.stack import BenchStack, Scheduler, Worker  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from lg_core import with_configuration  # noqa: E402
from lg_workers.cli import DEFAULT_QUEUES  # noqa: E402
from lg_workers.queues import TOOLS  # noqa: E402
from lg_workers.worker import plan as worker_plan  # noqa: E402

TREE = Path(__file__).resolve().parents[1]
IMPORTS = {
    "bare": "pass",
    "lg_core": "import lg_core",
    "floor": "import sqlalchemy, pydantic, httpx",
    "agent": "from lg_core import Agent, Tool",
}
FLOOR_POOL = ("prefork", 2)
LEASE_SECONDS = 15.0  # the engine's default: the restart must not wait for it
SCHEDULER_INTERVAL = 1.0
TARGET_IMPORT = 1.3
TARGET_RESTART = 1.2
TARGET_MEMORY = 1.5
# "[2026-12-06 06:01:17,684: INFO/MainProcess] w1@vm ready."
READY_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}): \w+/MainProcess\] (\S+) ready\.$", re.M)


@dataclass(frozen=True)
class Plan:
    rounds: int  # worker rounds: a bare Celery worker and an lg worker (killed, then restarted) each
    import_rounds: int
    settle_s: float  # after ready, before reading the RSS
    warmup: bool  # one untimed worker round first (files in the page cache, bytecode compiled)


FULL = Plan(rounds=7, import_rounds=15, settle_s=3.0, warmup=True)
QUICK = Plan(rounds=2, import_rounds=3, settle_s=1.0, warmup=False)


def series(samples: list[float]) -> dict[str, Any]:
    return {
        "samples": samples,
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
    }


# -- 1. import time --------------------------------------------------------------------------


def _time_python(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=TREE, check=True)
    return time.perf_counter() - started


def measure_imports(rounds: int) -> dict[str, Any]:
    """Milliseconds of each import beyond a bare interpreter's start, one sample of each per round."""
    names = list(IMPORTS)
    for code in IMPORTS.values():  # warm-up: bytecode compiled, files in the page cache
        _time_python(code)
    samples: dict[str, list[float]] = {name: [] for name in ("lg_core", "floor", "agent", "bare")}
    for number in range(rounds):
        order = names[number % len(names) :] + names[: number % len(names)]
        took = {name: _time_python(IMPORTS[name]) for name in order}
        samples["bare"].append(took["bare"] * 1000)
        for name in ("lg_core", "floor", "agent"):
            samples[name].append((took[name] - took["bare"]) * 1000)
    return {name: series(values) for name, values in samples.items()}


# -- 2 and 3. workers -----------------------------------------------------------------------------


def wait_ready(worker: Worker, count: int, timeout: float = 90) -> float:
    """When ``worker``'s log showed its ``count``-th " ready." line: the line's own timestamp
    (Celery's, to the millisecond), or the time it was seen when the line has none."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.process.poll() is not None:
            raise BenchError(f"worker {worker.name} exited with {worker.process.returncode}:\n{worker.tail()}")
        text = worker.log.read_text(errors="replace")
        if text.count(" ready.") >= count:
            stamps = ready_stamps(text)
            return max(stamps.values()) if len(stamps) >= count else time.time()
        time.sleep(0.01)
    raise BenchError(f"worker {worker.name} not ready after {timeout} s:\n{worker.tail()}")


def ready_stamps(text: str) -> dict[str, float]:
    """Each Celery worker's " ready." line in a log, by the worker's name: the line's timestamp."""
    return {
        name: time.mktime(time.strptime(day, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000
        for day, ms, name in READY_LINE.findall(text)
    }


def idle_memory(pid: int) -> dict[str, Any]:
    """RSS of ``pid`` and every process under it."""
    pids = process_tree(pid)
    each = [rss_bytes([p]) for p in pids]
    return {"processes": len(pids), "total_bytes": sum(each), "each_bytes": each}


def bare_round(stack: BenchStack, plan: Plan) -> tuple[float, dict[str, Any]]:
    """A bare Celery worker: seconds from its start to ready, and its memory once settled."""
    started = time.time()
    worker = stack.start_floor_worker(*FLOOR_POOL, app="distbench.bare_app", wait=False)
    try:
        ready = wait_ready(worker, 1) - started
        time.sleep(plan.settle_s)
        return ready, idle_memory(worker.pid)
    finally:
        stack.stop_workers([worker])


def lg_round(
    stack: BenchStack, probe: StoreProbe, scheduler: Scheduler, broker: redis.Redis, plan: Plan, groups: int
) -> dict[str, Any]:
    """An ``lg worker``: ready and idle memory; then one run interrupted by SIGKILL and the restart."""
    hang = {"BENCH_HANG_DIR": str(stack.hang_dir)}
    started = time.time()
    worker = stack.start_lg_worker(env=hang)
    ready = wait_ready(worker, groups) - started
    time.sleep(plan.settle_s)
    memory = idle_memory(worker.pid)

    since = time.time()
    run_id = bench_app.HangAgent.start_execution("Hang once.").run_id
    wait_hanging(stack.hang_dir, [run_id], timeout=60)
    killed_at = time.time()
    worker.kill_whole()
    stack.stop_workers([worker])  # closes its log; nothing is left to stop
    marker = f"of run {run_id}"
    deadline = time.monotonic() + 2 * LEASE_SECONDS
    while marker not in scheduler.text():
        if time.monotonic() > deadline:
            raise BenchError(f"the scheduler did not re-dispatch run {run_id}'s step:\n{scheduler.text()[-3000:]}")
        time.sleep(0.02)
    redispatched = time.time() - killed_at
    # A re-dispatch sent within a few ms of the kill can be handed by Redis to the dead worker's
    # blocked BRPOP before Redis has seen its connection close, and is lost; the sweeper sends the
    # step again a lease later. The restart is timed once the step's message waits in the queue.
    lost = _queued(broker, TOOLS) == 0
    deadline = time.monotonic() + 3 * LEASE_SECONDS
    while _queued(broker, TOOLS) == 0:
        if time.monotonic() > deadline:
            raise BenchError(f"run {run_id}'s step never reached {TOOLS}:\n{scheduler.text()[-3000:]}")
        time.sleep(0.05)
    queued = time.time() - killed_at

    started = time.time()
    restarted = stack.start_lg_worker(env=hang)
    try:
        first = _first_commit_after(probe, run_id, started, timeout=60 + 2 * LEASE_SECONDS)
        if probe.wait_finished(since, 1, timeout=60) < 1:
            raise BenchError(f"run {run_id} did not finish after the restart:\n{restarted.tail()}")
        # The step is a tool call: the worker consuming lg.tools (by default the threads pool's) takes it.
        wait_ready(restarted, 1)
        stamps = ready_stamps(restarted.log.read_text(errors="replace"))
        tools_ready = next((at for name, at in stamps.items() if "model" in name), min(stamps.values()))
    finally:
        stack.stop_workers([restarted])
    return {
        "ready_s": ready,
        "memory": memory,
        "redispatch_s": redispatched,
        "queued_s": queued,
        "redispatch_lost": lost,
        "restart_s": first - started,
        "restart_tools_ready_s": tools_ready - started,
    }


def _queued(broker: redis.Redis, queue: str) -> int:
    """Messages waiting in ``queue``: kombu keeps one Redis list per priority step."""
    return sum(int(broker.llen(queue if step == 0 else f"{queue}\x06\x16{step}")) for step in (0, 3, 6, 9))


def _first_commit_after(probe: StoreProbe, run_id: str, after: float, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [s.finished_at for s in probe.steps_of([run_id])[run_id] if s.finished_at and s.finished_at > after]
        if done:
            return min(done)
        time.sleep(0.05)
    raise BenchError(f"run {run_id}: no step committed within {timeout:.0f} s of the restart")


def measure_workers(stack: BenchStack, probe: StoreProbe, plan: Plan) -> dict[str, Any]:
    groups = len(worker_plan(DEFAULT_QUEUES.split(",")))
    scheduler = stack.start_scheduler(local_liveness=True, interval=SCHEDULER_INTERVAL)
    broker = redis.Redis.from_url(stack.redis.url)
    bare: list[tuple[float, dict[str, Any]]] = []
    lg: list[dict[str, Any]] = []
    try:
        if plan.warmup:
            progress("workers: warm-up round")
            bare_round(stack, plan)
            lg_round(stack, probe, scheduler, broker, plan, groups)
        for number in range(plan.rounds):
            progress(f"workers: round {number + 1} of {plan.rounds}")
            if number % 2 == 0:
                bare.append(bare_round(stack, plan))
                lg.append(lg_round(stack, probe, scheduler, broker, plan, groups))
            else:
                lg.append(lg_round(stack, probe, scheduler, broker, plan, groups))
                bare.append(bare_round(stack, plan))
    finally:
        broker.close()
        stack.stop_scheduler(scheduler)
    return {
        "start": {
            "bare_ready_s": series([ready for ready, _ in bare]),
            "lg_restart_s": series([r["restart_s"] for r in lg]),
            "lg_ready_s": series([r["ready_s"] for r in lg]),
            "lg_redispatch_s": series([r["redispatch_s"] for r in lg]),
            "lg_queued_s": series([r["queued_s"] for r in lg]),
            "lg_restart_tools_ready_s": series([r["restart_tools_ready_s"] for r in lg]),
            "lg_restart_ready_to_commit_s": series([r["restart_s"] - r["restart_tools_ready_s"] for r in lg]),
        },
        "redispatches_lost": sum(r["redispatch_lost"] for r in lg),
        "memory": {
            "bare": _memory_series([memory for _, memory in bare]),
            "lg": _memory_series([r["memory"] for r in lg]),
        },
    }


def _memory_series(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    mib = 2**20
    return {
        "processes": series([float(m["processes"]) for m in rounds]),
        "per_process_mib": series([m["total_bytes"] / m["processes"] / mib for m in rounds]),
        "total_mib": series([m["total_bytes"] / mib for m in rounds]),
        "each_mib": [[b / mib for b in m["each_bytes"]] for m in rounds],  # the tree's order: parents first
    }


# -- report ---------------------------------------------------------------------------------------


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    imports, start, memory = report["imports"], report["workers"]["start"], report["workers"]["memory"]
    rows = [
        (
            "import lg_core / import sqlalchemy, pydantic, httpx",
            imports["lg_core"]["median"],
            imports["floor"]["median"],
            TARGET_IMPORT,
        ),
        (
            "lg worker restart -> first committed step / bare Celery worker start -> ready",
            start["lg_restart_s"]["median"],
            start["bare_ready_s"]["median"],
            TARGET_RESTART,
        ),
        (
            "idle lg worker RSS per process / bare Celery worker's",
            memory["lg"]["per_process_mib"]["median"],
            memory["bare"]["per_process_mib"]["median"],
            TARGET_MEMORY,
        ),
    ]
    return [
        {"name": name, "value": value / floor, "goal": f"<= {goal}x", "passed": value / floor <= goal}
        for name, value, floor, goal in rows
    ]


def environment(stack: BenchStack) -> dict[str, Any]:
    where = subprocess.run(
        [sys.executable, "-c", "import lg_core; print(lg_core.__file__)"],
        cwd=TREE,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    groups = worker_plan(DEFAULT_QUEUES.split(","))
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load average at start (1, 5, 15 min)": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "celery / kombu / SQLAlchemy / pydantic / httpx": " / ".join(
            version(name) for name in ("celery", "kombu", "sqlalchemy", "pydantic", "httpx")
        ),
        "lg_core imported from": where,
        "lg worker (default queues)": "; ".join(
            f"{','.join(g.queues)} on a {g.pool} pool of {g.concurrency}" for g in groups
        ),
        "bare Celery worker": f"distbench.bare_app, {FLOOR_POOL[0]} pool of {FLOOR_POOL[1]}",
        "lease / scheduler": f"{LEASE_SECONDS:g} s / `lg scheduler --interval {SCHEDULER_INTERVAL:g}`",
        "worker log level": stack.loglevel,
    }


def run_benchmark(plan: Plan, *, quick: bool) -> dict[str, Any]:
    progress(f"imports: {plan.import_rounds} rounds")
    imports = measure_imports(plan.import_rounds)
    stack = BenchStack(lease_seconds=LEASE_SECONDS).start()
    check_settings(stack.redis.url)
    probe = StoreProbe(stack.store_url)
    configuration = stack.configuration()
    try:
        with with_configuration(configuration):
            configuration.runtime()  # creates the schema before any worker opens the store
            report: dict[str, Any] = {"quick": quick, "environment": environment(stack), "imports": imports}
            report["workers"] = measure_workers(stack, probe, plan)
            report["environment"]["load average at end (1, 5, 15 min)"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    finally:
        probe.close()
        configuration.close()
        stack.close()
    report["targets"] = targets(report)
    return report


def _table(*columns: str) -> Table:
    table = Table(show_header=True, header_style="bold")
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    return table


def _rows(table: Table, rows: list[tuple[str, dict[str, Any]]], fmt: str) -> None:
    for label, data in rows:
        table.add_row(label, *(format(data[k], fmt) for k in ("median", "min", "max")), str(len(data["samples"])))


def print_report(console: Console, report: dict[str, Any]) -> None:
    console.rule("[bold]Environment")
    if report["quick"]:
        console.print("[yellow]--quick: a smoke run with few rounds; the verdicts below mean nothing.")
    env = Table(show_header=False)
    env.add_column(style="bold")
    env.add_column()
    for key, value in report["environment"].items():
        env.add_row(key, str(value))
    console.print(env)

    imports = report["imports"]
    console.rule("[bold]1. Import time")
    console.print(
        "Wall time of `python -c CODE` in a fresh process, minus `python -c pass` timed in the same round; "
        "one sample of each per round, in an order that rotates."
    )
    table = _table("ms", "median", "min", "max", "rounds")
    _rows(
        table,
        [
            ("import lg_core", imports["lg_core"]),
            ("floor: import sqlalchemy, pydantic, httpx", imports["floor"]),
            ("reference: from lg_core import Agent, Tool", imports["agent"]),
            ("python -c pass (subtracted from both)", imports["bare"]),
        ],
        ".1f",
    )
    console.print(table)

    start = report["workers"]["start"]
    console.rule("[bold]2. A restarted worker's first step")
    console.print(
        "lg worker restart: `lg worker` (default queues) is SIGKILLed with every process under it while a run's tool "
        "call runs; once `lg scheduler` has re-dispatched the step (its holder, a dead process on this host, loses "
        "the step at once: no lease to wait for) and its message waits in lg.tools, a new `lg worker` is started. "
        "Measured: its start -> the run's "
        "next step committed (the store's timestamp). Floor: a bare Celery worker's start -> its ' ready.' log line."
    )
    table = _table("seconds", "median", "min", "max", "rounds")
    _rows(
        table,
        [
            ("lg worker restart -> first committed step", start["lg_restart_s"]),
            ("floor: bare Celery worker start -> ready", start["bare_ready_s"]),
            ("  of which: start -> the tools' Celery worker ready", start["lg_restart_tools_ready_s"]),
            ("  of which: ready -> the step committed", start["lg_restart_ready_to_commit_s"]),
            ("reference: a fresh lg worker's start -> every Celery worker ready", start["lg_ready_s"]),
            ("reference: SIGKILL -> step re-dispatched by lg scheduler", start["lg_redispatch_s"]),
            ("reference: SIGKILL -> the step's message waiting in lg.tools", start["lg_queued_s"]),
        ],
        ".3f",
    )
    console.print(table)
    lost = report["workers"]["redispatches_lost"]
    console.print(
        f"Re-dispatches lost to the killed worker's connection: {lost} of {len(start['lg_restart_s']['samples'])} "
        "rounds (Redis handed the message to the dead worker's blocked BRPOP; the sweeper sent it again a lease "
        "later, before the restart was timed)."
    )

    memory = report["workers"]["memory"]
    console.rule("[bold]3. Idle worker memory")
    console.print(
        "RSS (VmRSS) of the process started and every process under it, after ready and a settle; per process = "
        "total / processes. RSS counts pages a forked child shares with its parent in both."
    )
    table = _table("MiB", "median", "min", "max", "rounds")
    _rows(
        table,
        [
            ("lg worker, per process", memory["lg"]["per_process_mib"]),
            ("floor: bare Celery worker, per process", memory["bare"]["per_process_mib"]),
            ("lg worker, total", memory["lg"]["total_mib"]),
            ("bare Celery worker, total", memory["bare"]["total_mib"]),
            ("lg worker, processes", memory["lg"]["processes"]),
            ("bare Celery worker, processes", memory["bare"]["processes"]),
        ],
        ".1f",
    )
    console.print(table)
    for label, key in (("lg worker", "lg"), ("bare Celery worker", "bare")):
        each = memory[key]["each_mib"][0]
        console.print(f"{label}, first round, each process (parents first): " + ", ".join(f"{m:.1f}" for m in each))

    console.rule("[bold]Targets")
    table = _table("target", "measured", "goal", "result")
    for row in report["targets"]:
        verdict = "[green]PASS" if row["passed"] else "[red]FAIL"
        table.add_row(row["name"], f"{row['value']:.2f}x", row["goal"], verdict)
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer rounds, no warm-up round")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--rounds", type=int, help="override the number of worker rounds")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan = Plan(**{**plan.__dict__, "rounds": args.rounds})
    report = run_benchmark(plan, quick=args.quick)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(Console(width=None if sys.stdout.isatty() else 150), report)
    missed = any(not row["passed"] for row in report["targets"])
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
