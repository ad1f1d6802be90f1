#!/usr/bin/env python
"""LittleGhost on real Celery workers: the floor, per-step cost, throughput, recovery, memory.

    .venv/bin/python bench/distributed.py            # full run (~4 minutes on 2 CPUs)
    .venv/bin/python bench/distributed.py --quick    # smoke run of every measurement (~80 s)
    .venv/bin/python bench/distributed.py --json     # one JSON document instead of tables
    .venv/bin/python bench/distributed.py --json-file report.json   # tables, and the JSON in a file
    .venv/bin/python bench/distributed.py --profile  # adds py-spy's view of the workers in section 2

Everything runs in one go on processes this script starts and stops: a
PostgreSQL server with fsync ON (a durable engine is measured durable), a
redis-server, Celery workers started as ``lg worker`` starts them, and
schedulers. The sections (bench/README.md explains each, and bench/FINDINGS.md
has what each run found):

1. The raw floor: a chain of Celery tasks on the same Redis, each enqueuing
   the next, with lg_workers' broker settings on the lg.model queue's pool.
2. The per-step cost of a durable run: 41 steps (20 tool turns + a final
   turn) with a zero-latency model; ratio to (1). Target <= 1.5x.
3. Throughput: concurrent runs with a 50 ms model, against the ideal
   concurrency-bound rate; the sized deployment runs it in rounds (three in
   a full run) and reports the median one. Target >= 80%.
4. SIGKILL mid tool call -> the run's next committed step, for a pool child
   and for a whole worker, on the same-host and the lease-expiry paths.
   Targets: <= 2 s for a pool child, <= lease + 2 s for a whole worker.
5. Worker RSS over 1,000 runs after a warm-up. Target: growth <= 10%.

The exit status is 0 whatever the figures are (``--strict`` exits 1 on a
missed target), so the smoke test can run ``--quick`` on any machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the distbench helpers

import redis  # noqa: E402
from distbench.app import CHAIN_STEPS, LOAD_MODEL_TURNS, MODEL_DELAY  # noqa: E402
from distbench.measure import (  # noqa: E402
    measure_celery_reference,
    measure_floor,
    measure_memory,
    measure_protocol_floor,
    measure_recovery,
    measure_step_cost,
    measure_throughput,
    median_round,
    progress,
)
from distbench.probes import StoreProbe  # noqa: E402
from distbench.report import as_json, print_report, targets  # noqa: E402
from distbench.stack import BenchStack, Worker  # noqa: E402
from rich.console import Console  # noqa: E402

from lg_core import with_configuration  # noqa: E402
from lg_workers.queues import MODEL, ORCHESTRATE, POOLS, TOOLS  # noqa: E402

ALL_QUEUES = (ORCHESTRATE, MODEL, TOOLS)
LOGLEVEL = "INFO"  # `lg worker`'s default; Celery logs every task received and succeeded at this level


@dataclass(frozen=True)
class Plan:
    lease_seconds: float
    floor_chains: int
    floor_hops: int
    step_runs: int
    step_warmup: int
    throughput_runs: int
    recovery_runs: int
    memory_warmup: int
    memory_runs: int
    memory_wave: int
    reference_chains: int  # section 3's Celery-only reference, per deployment
    throughput_rounds: int  # rounds of section 3 on the sized deployment (odd): the median one is reported


FULL = Plan(
    lease_seconds=15.0,
    floor_chains=5,
    floor_hops=300,
    step_runs=7,
    step_warmup=3,
    throughput_runs=500,
    recovery_runs=3,
    memory_warmup=100,
    memory_runs=1000,
    memory_wave=100,
    reference_chains=200,
    throughput_rounds=3,
)
QUICK = Plan(
    lease_seconds=3.0,
    floor_chains=3,
    floor_hops=50,
    step_runs=2,
    step_warmup=1,
    throughput_runs=40,
    recovery_runs=2,
    memory_warmup=20,
    memory_runs=60,
    memory_wave=20,
    reference_chains=10,
    throughput_rounds=1,
)


def deployment(workers: list[Worker]) -> str:
    """How ``lg worker`` (default queues) laid the queues out: one Celery worker per pool kind."""
    return "; ".join(
        f"{','.join(w.group.queues)} on a {w.group.pool} pool of {w.group.concurrency}" for w in workers if w.group
    )


def environment(stack: BenchStack, probe: StoreProbe, plan: Plan) -> dict[str, Any]:
    pg = probe.server_settings()
    info = redis.Redis.from_url(stack.redis.url).info("server")
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "postgresql": pg["server_version"],
        "postgresql fsync": pg["fsync"],
        "postgresql synchronous_commit / wal_sync_method": f"{pg['synchronous_commit']} / {pg['wal_sync_method']}",
        "redis": info.get("redis_version"),
        "celery / kombu / redis-py / psycopg / SQLAlchemy": " / ".join(
            version(name) for name in ("celery", "kombu", "redis", "psycopg", "sqlalchemy")
        ),
        "lease_seconds": plan.lease_seconds,
        "worker log level": f"{LOGLEVEL} (lg worker's default)",
        "deployment": "",
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_benchmark(plan: Plan, *, quick: bool, profile: bool) -> dict[str, Any]:
    """Every section on one stack (one Redis, one PostgreSQL), in the order that needs fewest worker restarts."""
    stack = BenchStack(lease_seconds=plan.lease_seconds, loglevel=LOGLEVEL).start()
    probe = StoreProbe(stack.store_url)
    configuration = stack.configuration()
    try:
        with with_configuration(configuration):
            configuration.runtime()  # creates the schema before any worker opens the store
            report: dict[str, Any] = {
                "quick": quick,
                "environment": environment(stack, probe, plan),
            }
            floor, protocol, reference = _floor(stack, plan)
            report["floor"] = asdict(floor)
            report["protocol_floor"] = asdict(protocol)
            primary = _on_defaults(stack, probe, plan, report, profile)
            primary.celery_only = reference
            report["throughput"] = [
                asdict(primary),
                asdict(_sized_throughput(stack, probe, plan, primary)),
            ]
            report["recovery"] = [asdict(result) for result in _recovery(stack, probe, plan)]
    finally:
        probe.close()
        configuration.close()
        stack.close()
    return report


def _floor(stack: BenchStack, plan: Plan) -> tuple[Any, Any, Any]:
    """Section 1 (the raw floor and the protocol floor), and section 3's Celery-only reference for
    the default model pool, on one floor worker."""
    worker = stack.start_floor_worker(*POOLS[MODEL])
    try:
        progress(f"1. raw floor: {plan.floor_chains} chains of {plan.floor_hops} hops")
        floor = measure_floor(stack, worker, chains=plan.floor_chains, hops=plan.floor_hops)
        progress(f"1. protocol floor: {plan.floor_chains} chains of {plan.floor_hops} claim + commit hops")
        protocol = measure_protocol_floor(stack, worker, chains=plan.floor_chains, hops=plan.floor_hops)
        return floor, protocol, _reference(stack, plan, worker)
    finally:
        stack.stop_workers([worker])


def _on_defaults(stack: BenchStack, probe: StoreProbe, plan: Plan, report: dict[str, Any], profile: bool) -> Any:
    """Sections 2, 3 (first deployment) and 5 on the workers `lg worker` starts by default."""
    workers = stack.start_workers(ALL_QUEUES)
    defaults = f"`lg worker` (default queues): {deployment(workers)}"
    report["environment"]["deployment"] = defaults
    groups = _cpu_groups(stack, workers)
    progress(f"2. per-step cost: {plan.step_runs} runs of {CHAIN_STEPS} steps")
    profiler = _profiler(workers) if profile else None
    report["step_cost"] = asdict(
        measure_step_cost(stack, probe, groups, runs=plan.step_runs, warmup=plan.step_warmup, profiler=profiler)
    )
    progress(f"3. throughput: {plan.throughput_runs} concurrent runs on `lg worker` defaults")
    primary = measure_throughput(
        stack,
        probe,
        groups,
        label="lg worker defaults",
        deployment=defaults,
        runs=plan.throughput_runs,
        model_threads=POOLS[MODEL][1],
        cpus=os.cpu_count() or 1,
    )
    progress(f"5. worker memory: {plan.memory_warmup} warm-up + {plan.memory_runs} runs")
    report["memory"] = asdict(
        measure_memory(
            stack,
            probe,
            workers,
            runs=plan.memory_runs,
            warmup=plan.memory_warmup,
            wave=plan.memory_wave,
        )
    )
    stack.stop_workers(workers)
    return primary


def _sized_throughput(stack: BenchStack, probe: StoreProbe, plan: Plan, primary: Any) -> Any:
    """Section 3 again, with as many model threads as this machine's CPU can keep busy (half its ceiling)."""
    per_worker = max(
        1,
        round(
            sized_model_threads(primary.cpu_ceiling_runs_per_s, primary.model_turns_per_run, primary.model_delay_s) / 2
        ),
    )
    threads = 2 * per_worker
    floor_worker = stack.start_floor_worker("threads", threads)
    try:
        reference = _reference(stack, plan, floor_worker)
    finally:
        stack.stop_workers([floor_worker])
    # Two worker processes (one per CPU: a process runs Python on one core at a time), each
    # consuming every queue on threads, so each runs its runs' steps one after the other.
    workers = [
        worker for _ in range(2) for worker in stack.start_workers(ALL_QUEUES, pool="threads", concurrency=per_worker)
    ]
    rounds = []
    try:
        for number in range(1, plan.throughput_rounds + 1):
            progress(
                f"3. throughput: {plan.throughput_runs} concurrent runs on {threads} model threads "
                f"(round {number} of {plan.throughput_rounds})"
            )
            rounds.append(
                measure_throughput(
                    stack,
                    probe,
                    _cpu_groups(stack, workers),
                    label="model threads sized to the CPU",
                    deployment=f"2 x `lg worker --pool threads -c {per_worker}` (every queue): {deployment(workers)}",
                    runs=plan.throughput_runs,
                    model_threads=threads,
                    cpus=os.cpu_count() or 1,
                )
            )
    finally:
        stack.stop_workers(workers)
    result = median_round(rounds)
    result.celery_only = reference
    return result


def _reference(stack: BenchStack, plan: Plan, worker: Worker) -> Any:
    """Celery alone on a threads pool like the model queue's: chains of model-turn-long tasks (sleeping 50 ms)."""
    threads = worker.pool[1]
    chains = max(plan.reference_chains, 2 * threads)  # enough chains in flight to keep every thread busy
    progress(
        f"3. Celery-only reference: {chains} chains of {LOAD_MODEL_TURNS} tasks of {MODEL_DELAY * 1000:.0f} ms, "
        f"{threads} threads"
    )
    return measure_celery_reference(stack, worker, chains=chains, hops=LOAD_MODEL_TURNS, pause=MODEL_DELAY)


def _recovery(stack: BenchStack, probe: StoreProbe, plan: Plan) -> list[Any]:
    """Section 4: a model worker stays up; tools workers come and go in each scenario."""
    workers = stack.start_workers((ORCHESTRATE, MODEL))
    try:
        return [
            result
            for local in (True, False)
            for result in measure_recovery(stack, probe, runs=plan.recovery_runs, local_liveness=local)
        ]
    finally:
        stack.stop_workers(workers)


def sized_model_threads(ceiling_runs_per_s: float, model_turns: int, delay: float) -> int:
    """Model threads whose ideal rate is half the CPU-bound ceiling measured with the defaults.

    A deployment sized like this is bound by its concurrency, not by the CPU,
    so its achieved / ideal shows what the engine adds to each model turn
    (dispatch, commits) rather than how busy the machine is.
    """
    return max(1, round(0.5 * ceiling_runs_per_s * model_turns * delay))


def _cpu_groups(stack: BenchStack, workers: list[Worker]) -> dict[str, int | tuple[int, ...]]:
    groups: dict[str, int | tuple[int, ...]] = {}
    for worker in workers:
        assert worker.group is not None
        kind = "model worker" if MODEL in worker.group.queues else "orchestrate worker"
        name, number = kind, 2
        while name in groups:  # a second worker of the same kind
            name, number = f"{kind} {number}", number + 1
        groups[name] = worker.pid
    assert stack.postgres.process is not None and stack.redis.process is not None
    groups["postgresql"] = stack.postgres.process.pid
    groups["redis"] = stack.redis.process.pid
    groups["client (this process)"] = (os.getpid(),)
    return groups


def _profiler(workers: list[Worker]) -> Any:
    from distbench.profile import PySpy

    return PySpy({f"{w.group.pool} worker ({','.join(w.group.queues)})": w.pid for w in workers if w.group})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run of every measurement (short lease, few samples)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--json-file", type=Path, metavar="PATH", help="also write the JSON document to PATH")
    parser.add_argument("--profile", action="store_true", help="sample the workers with py-spy during section 2")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    report = run_benchmark(QUICK if args.quick else FULL, quick=args.quick, profile=args.profile)
    if args.json_file is not None:
        args.json_file.write_text(json.dumps(as_json(report), indent=2))
    if args.json:
        print(json.dumps(as_json(report), indent=2))
    else:
        print_report(Console(width=None if sys.stdout.isatty() else 150), report)
    missed = any(t.passed is False for t in targets(report))
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
