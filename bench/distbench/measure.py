"""The five measurements of bench/distributed.py, each against the processes of one BenchStack.

Every function takes the running stack (and, for LittleGhost runs, the bench
process is configured as a client with ``with_configuration``), measures, and
returns a plain dataclass; nothing here prints except progress lines on stderr.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from distbench import app as bench_app
from distbench.floor_app import (
    DURABLE_TASK,
    create_floor_app,
    create_protocol_tables,
    done_key,
    start_protocol_chain,
)
from distbench.floor_app import QUEUE as FLOOR_QUEUE
from distbench.floor_app import TASK as FLOOR_TASK
from distbench.probes import CpuMeter, StoreProbe, machine_busy, process_tree, rss_bytes
from distbench.stack import BenchStack, Worker


class BenchError(RuntimeError):
    """A measurement could not be made (a run failed, a worker did not come back...)."""


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# -- 1. the raw floor ------------------------------------------------------------------------


@dataclass
class FloorResult:
    pool: str
    concurrency: int
    chains: int
    hops: int
    per_chain_ms: list[float]
    median_ms: float
    cpu_ms_per_hop: dict[str, float]


def measure_floor(stack: BenchStack, worker: Worker, *, chains: int, hops: int) -> FloorResult:
    """Median time per hop over ``chains`` chains of ``hops`` Celery tasks, each enqueuing the next,
    on ``worker`` (a floor worker: ``stack.start_floor_worker``)."""
    assert worker.group is None and stack.redis.process is not None
    sender = create_floor_app(stack.redis.url)
    client = redis.Redis.from_url(stack.redis.url, socket_timeout=150)
    _chain(sender, client, 20)  # warm-up: connections, the first task's imports
    meter = CpuMeter({"floor worker": worker.pid, "redis": stack.redis.process.pid}).start()
    per_chain = [_chain(sender, client, hops) / hops * 1000 for _ in range(chains)]
    cpu = meter.stop()
    client.close()
    pool, concurrency = worker.pool
    return FloorResult(
        pool,
        concurrency,
        chains,
        hops,
        per_chain,
        statistics.median(per_chain),
        {name: seconds * 1000 / (chains * hops) for name, seconds in cpu.items()},
    )


def _chain(sender: Any, client: redis.Redis, hops: int) -> float:
    chain = uuid.uuid4().hex
    started = time.perf_counter()
    sender.send_task(FLOOR_TASK, args=[chain, hops - 1], queue=FLOOR_QUEUE)
    if client.blpop([done_key(chain)], timeout=120) is None:
        raise BenchError(f"a floor chain of {hops} hops did not finish in 120 s")
    return time.perf_counter() - started


@dataclass
class ProtocolFloorResult:
    chains: int
    hops: int
    per_chain_ms: list[float]
    median_ms: float
    cpu_ms_per_hop: dict[str, float]


def measure_protocol_floor(stack: BenchStack, worker: Worker, *, chains: int, hops: int) -> ProtocolFloorResult:
    """Section 1's chain with the step protocol's store work in each task (``floor_app.durable_hop``): a claim
    and a durable commit on the run store's PostgreSQL, nothing else of LittleGhost."""
    assert worker.group is None and stack.redis.process is not None and stack.postgres.process is not None
    create_protocol_tables(stack.store_url)
    sender = create_floor_app(stack.redis.url)
    client = redis.Redis.from_url(stack.redis.url, socket_timeout=150)
    _protocol_chain(stack, sender, client, 20)  # warm-up: each worker thread's connection
    meter = CpuMeter(
        {"floor worker": worker.pid, "redis": stack.redis.process.pid, "postgresql": stack.postgres.process.pid}
    ).start()
    per_chain = [_protocol_chain(stack, sender, client, hops) / hops * 1000 for _ in range(chains)]
    cpu = meter.stop()
    client.close()
    return ProtocolFloorResult(
        chains,
        hops,
        per_chain,
        statistics.median(per_chain),
        {name: seconds * 1000 / (chains * hops) for name, seconds in cpu.items()},
    )


def _protocol_chain(stack: BenchStack, sender: Any, client: redis.Redis, hops: int) -> float:
    chain = uuid.uuid4().hex
    start_protocol_chain(stack.store_url, chain)
    started = time.perf_counter()
    sender.send_task(DURABLE_TASK, args=[chain, 0, hops - 1], queue=FLOOR_QUEUE)
    if client.blpop([done_key(chain)], timeout=120) is None:
        raise BenchError(f"a protocol-floor chain of {hops} hops did not finish in 120 s (see the floor worker's log)")
    return time.perf_counter() - started


@dataclass
class CeleryReference:
    threads: int
    chains: int
    hops: int
    pause_s: float
    tasks_per_s: float
    ideal_tasks_per_s: float
    ratio: float


def measure_celery_reference(
    stack: BenchStack, worker: Worker, *, chains: int, hops: int, pause: float
) -> CeleryReference:
    """Section 3 without LittleGhost: ``chains`` chains of ``hops`` tasks that each sleep ``pause``,
    all started at once on ``worker``'s threads pool; achieved / ideal (threads / pause)."""
    pool, threads = worker.pool
    if pool != "threads":
        raise BenchError(f"the Celery-only reference needs a threads pool, not {pool}")
    sender = create_floor_app(stack.redis.url)
    client = redis.Redis.from_url(stack.redis.url, socket_timeout=150)
    ids = [uuid.uuid4().hex for _ in range(chains)]
    started = time.perf_counter()
    for chain in ids:
        sender.send_task(FLOOR_TASK, args=[chain, hops - 1, pause], queue=FLOOR_QUEUE)
    for chain in ids:
        if client.blpop([done_key(chain)], timeout=120) is None:
            raise BenchError(f"a reference chain of {hops} hops did not finish")
    elapsed = time.perf_counter() - started
    client.close()
    rate, ideal = chains * hops / elapsed, threads / pause
    return CeleryReference(threads, chains, hops, pause, rate, ideal, rate / ideal)


# -- 2. per-step cost of a durable run -----------------------------------------------------------


@dataclass
class StepCostResult:
    runs: int
    steps_per_run: int
    wall_ms: list[float]  # per step, each run: start_execution -> terminal event, / steps
    store_ms: list[float]  # per step, each run: run created -> last step committed (store clock), / steps
    median_wall_ms: float
    median_store_ms: float
    gap_ms: float  # median: a step's commit -> the next step's claim
    model_exec_ms: float  # median: claim -> commit of a model turn
    tool_exec_ms: float
    cpu_ms_per_step: dict[str, float]
    profile: dict[str, list[tuple[float, str]]] | None = None


def measure_step_cost(
    stack: BenchStack,
    probe: StoreProbe,
    groups: dict[str, int | tuple[int, ...]],
    *,
    runs: int,
    warmup: int,
    profiler: Any = None,
) -> StepCostResult:
    """Sequential ChainAgent runs (41 steps, zero-latency model) against the running workers."""
    steps = bench_app.CHAIN_STEPS
    for _ in range(warmup):
        _run_to_terminal(bench_app.ChainAgent)
    since = time.time()
    meter = CpuMeter(groups).start()
    if profiler is not None:
        profiler.start()
    wall = [_run_to_terminal(bench_app.ChainAgent) / steps * 1000 for _ in range(runs)]
    profile = profiler.stop() if profiler is not None else None
    cpu = meter.stop()
    records = probe.runs_since(since)
    step_rows = probe.steps_of([r.id for r in records])
    _check_completed(records, step_rows, runs, steps)
    store_ms: list[float] = []
    gaps: list[float] = []
    model_exec: list[float] = []
    tool_exec: list[float] = []
    for record in records:
        rows = sorted(step_rows[record.id], key=lambda s: s.started_at or 0.0)
        store_ms.append((max(s.finished_at or 0.0 for s in rows) - record.created_at) / steps * 1000)
        gaps += [
            (b.started_at - a.finished_at) * 1000
            for a, b in zip(rows, rows[1:], strict=False)
            if a.finished_at and b.started_at
        ]
        for s in rows:
            if s.started_at and s.finished_at:
                (model_exec if s.kind == "model" else tool_exec).append((s.finished_at - s.started_at) * 1000)
    return StepCostResult(
        runs,
        steps,
        wall,
        store_ms,
        statistics.median(wall),
        statistics.median(store_ms),
        statistics.median(gaps),
        statistics.median(model_exec),
        statistics.median(tool_exec),
        {name: seconds * 1000 / (runs * steps) for name, seconds in cpu.items()},
        profile,
    )


def _run_to_terminal(agent: Any) -> float:
    """Seconds from start_execution to the run's terminal event, read from its event stream."""
    started = time.perf_counter()
    execution = agent.start_execution("Record every step.")
    for event in execution.events():
        if event.terminal:
            return time.perf_counter() - started
    raise BenchError(f"run {execution.run_id}: its event stream ended without a terminal event")


def _check_completed(records: list[Any], step_rows: dict[str, list[Any]], runs: int, steps: int) -> None:
    if len(records) != runs:
        raise BenchError(f"expected {runs} runs in the store, found {len(records)}")
    for record in records:
        done = [s for s in step_rows[record.id] if s.status == "succeeded"]
        if record.status != "completed" or len(done) != steps:
            raise BenchError(f"run {record.id} ended {record.status} with {len(done)} of {steps} steps succeeded")


# -- 3. throughput -----------------------------------------------------------------------------


@dataclass
class ThroughputResult:
    label: str
    deployment: str
    runs: int
    model_threads: int
    model_turns_per_run: int
    model_delay_s: float
    ideal_runs_per_s: float
    # steady state: model turns committed between their 10th and 90th percentile, / turns per run
    achieved_runs_per_s: float
    overall_runs_per_s: float  # every run: first created -> last finished
    submit_s: float
    window_s: float
    latency_median_s: float
    latency_p95_s: float
    machine_busy_pct: float
    cpu_ms_per_run: dict[str, float]
    cpu_ceiling_runs_per_s: float
    model_worker_busy_pct: float
    celery_only: CeleryReference | None = None
    # achieved / ideal of every round of this deployment, in the order run; this result is the median one
    round_ratios: list[float] = field(default_factory=list)
    ratio: float = field(init=False)

    def __post_init__(self) -> None:
        self.ratio = self.achieved_runs_per_s / self.ideal_runs_per_s


def median_round(rounds: list[ThroughputResult]) -> ThroughputResult:
    """The round whose achieved / ideal is the median of ``rounds`` (an odd number), with every round's ratio.

    Why rounds: one round of 500 runs lasts about 25 s on the sized deployment,
    and this VM has slow stretches of that order that took 5-10 points off a
    single figure. The median of three rounds, each the full workload, is the
    figure a slow stretch in one of them does not move (bench/engine_overhead.py
    reports its median round for the same reason).
    """
    if not rounds or len(rounds) % 2 == 0:
        raise ValueError(f"median_round needs an odd number of rounds, got {len(rounds)}")
    chosen = sorted(rounds, key=lambda result: result.ratio)[len(rounds) // 2]
    chosen.round_ratios = [result.ratio for result in rounds]
    return chosen


def measure_throughput(
    stack: BenchStack,
    probe: StoreProbe,
    groups: dict[str, int | tuple[int, ...]],
    *,
    label: str,
    deployment: str,
    runs: int,
    model_threads: int,
    cpus: int,
) -> ThroughputResult:
    """Start ``runs`` LoadAgent runs at once and measure how fast the workers finish them."""
    turns, delay = bench_app.LOAD_MODEL_TURNS, bench_app.MODEL_DELAY
    since = time.time()
    busy0, total0 = machine_busy()
    meter = CpuMeter(groups).start()
    started = time.perf_counter()
    for n in range(runs):
        bench_app.LoadAgent.start_execution(f"Run {n}.")
    submit = time.perf_counter() - started
    done = probe.wait_finished(since, runs, timeout=60 + runs * 0.5)
    cpu = meter.stop()
    busy1, total1 = machine_busy()
    if done < runs:
        raise BenchError(f"only {done} of {runs} throughput runs finished")
    records = probe.runs_since(since)
    failed = [r for r in records if r.status != "completed"]
    if failed:
        raise BenchError(f"{len(failed)} throughput runs did not complete (e.g. {failed[0].id}: {failed[0].status})")
    commits = sorted(
        s.finished_at
        for rows in probe.steps_of([r.id for r in records]).values()
        for s in rows
        if s.kind == "model" and s.finished_at is not None
    )
    low, high = int(0.1 * len(commits)), int(0.9 * len(commits)) - 1
    window = max(r.finished_at or 0.0 for r in records) - min(r.created_at for r in records)
    latencies = sorted((r.finished_at or 0.0) - r.created_at for r in records)
    cpu_per_run = {name: seconds * 1000 / runs for name, seconds in cpu.items()}
    model_cpu = cpu.get("model worker", 0.0)
    return ThroughputResult(
        label=label,
        deployment=deployment,
        runs=runs,
        model_threads=model_threads,
        model_turns_per_run=turns,
        model_delay_s=delay,
        ideal_runs_per_s=model_threads / (turns * delay),
        achieved_runs_per_s=(high - low) / (commits[high] - commits[low]) / turns,
        overall_runs_per_s=runs / window,
        submit_s=submit,
        window_s=window,
        latency_median_s=statistics.median(latencies),
        latency_p95_s=latencies[int(0.95 * (runs - 1))],
        machine_busy_pct=100 * (busy1 - busy0) / max(total1 - total0, 1.0),
        cpu_ms_per_run=cpu_per_run,
        cpu_ceiling_runs_per_s=cpus * 1000 / max(sum(cpu_per_run.values()), 1e-9),
        model_worker_busy_pct=100 * model_cpu / window,
    )


# -- 4. recovery after SIGKILL -----------------------------------------------------------------


@dataclass
class RecoveryResult:
    victim: str  # "pool child" or "whole worker"
    path: str  # "same host" or "lease expiry"
    seconds: list[float]
    lease_s: float
    redispatched: int


def measure_recovery(stack: BenchStack, probe: StoreProbe, *, runs: int, local_liveness: bool) -> list[RecoveryResult]:
    """Kill a pool child and then a whole tools worker mid tool call, with one kind of scheduler running."""
    path = "same host" if local_liveness else "lease expiry"
    scheduler = stack.start_scheduler(local_liveness=local_liveness)
    results = []
    try:
        for victim in ("pool child", "whole worker"):
            progress(f"4. recovery: {victim}, {path} path")
            before = scheduler.text().count("re-dispatched")
            seconds = _kill_and_recover(stack, probe, victim, runs)
            redispatched = scheduler.text().count("re-dispatched") - before
            results.append(RecoveryResult(victim, path, seconds, stack.lease_seconds, redispatched))
    finally:
        stack.stop_scheduler(scheduler)
    return results


def _kill_and_recover(stack: BenchStack, probe: StoreProbe, victim: str, runs: int) -> list[float]:
    hang = {"BENCH_HANG_DIR": str(stack.hang_dir)}
    # `lg worker -Q lg.tools --pool prefork`: a pool child to kill (the default tools pool is threads)
    [tools] = stack.start_workers(("lg.tools",), pool="prefork", env=hang)
    since = time.time()
    ids = [bench_app.HangAgent.start_execution(f"Hang {n}.").run_id for n in range(runs)]
    pids = wait_hanging(stack.hang_dir, ids, timeout=60)
    standby: list[Worker] = []
    if victim == "whole worker":  # the surviving worker that takes the steps over
        standby = stack.start_workers(("lg.tools",), pool="prefork", env=hang)
    killed_at = time.time()
    if victim == "pool child":
        for pid in pids:
            _sigkill(pid)
    else:
        tools.kill_whole()
    done = probe.wait_finished(since, runs, timeout=stack.lease_seconds * 4 + 60)
    if done < runs:
        raise BenchError(f"{victim}: only {done} of {runs} runs finished after the kill")
    seconds = []
    for run_id, rows in probe.steps_of(ids).items():
        after = [s.finished_at for s in rows if s.finished_at is not None and s.finished_at > killed_at]
        if not after:
            raise BenchError(f"{victim}: run {run_id} committed nothing after the kill")
        seconds.append(min(after) - killed_at)
    stack.stop_workers([w for w in (tools, *standby) if w in stack.workers])
    return sorted(seconds)


def wait_hanging(folder: Path, run_ids: list[str], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # The name says it all (hang-{run_id}-{pid}): the file's content may not be written yet.
        names = dict(path.name[len("hang-") :].rsplit("-", 1) for path in folder.glob("hang-*"))
        found = {run_id: int(pid) for run_id, pid in names.items()}
        if all(run_id in found for run_id in run_ids):
            return [found[run_id] for run_id in run_ids]
        time.sleep(0.05)
    raise BenchError(f"the tool calls to kill did not start in {timeout} s")


def _sigkill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- 5. worker memory --------------------------------------------------------------------------


@dataclass
class MemoryResult:
    warmup_runs: int
    runs: int
    processes: int
    samples: list[tuple[int, int]]  # (runs finished after warm-up, RSS bytes of every worker process)
    growth_pct: float
    late_bytes_per_run: float  # slope over the second half: what keeps growing once caches are warm


def measure_memory(
    stack: BenchStack,
    probe: StoreProbe,
    workers: list[Worker],
    *,
    runs: int,
    warmup: int,
    wave: int,
) -> MemoryResult:
    """RSS of the workers (parents + pool children) after a warm-up and after every ``wave`` runs."""

    def rss() -> tuple[int, int]:
        pids = [pid for worker in workers for pid in process_tree(worker.pid)]
        return len(pids), rss_bytes(pids)

    _waves(probe, warmup, wave, lambda _done: None)
    processes, base = rss()
    samples = [(0, base)]
    _waves(probe, runs, wave, lambda done: samples.append((done, rss()[1])))
    growth = 100 * (samples[-1][1] - base) / base
    middle = samples[len(samples) // 2]
    late = (samples[-1][1] - middle[1]) / max(samples[-1][0] - middle[0], 1)
    return MemoryResult(warmup, runs, processes, samples, growth, late)


def _waves(probe: StoreProbe, runs: int, wave: int, after_wave: Callable[[int], None]) -> None:
    done = 0
    while done < runs:
        size = min(wave, runs - done)
        since = time.time()
        for n in range(size):
            bench_app.LoadAgent.start_execution(f"Run {done + n}.")
        if probe.wait_finished(since, size, timeout=60 + size) < size:
            raise BenchError(f"a wave of {size} runs did not finish")
        done += size
        after_wave(done)
