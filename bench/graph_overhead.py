#!/usr/bin/env python
"""What a Graph adds over the Agents it runs, in one process (local mode).

    .venv/bin/python bench/graph_overhead.py            # full run (~60 s)
    .venv/bin/python bench/graph_overhead.py --quick    # smoke run (~25 s)
    .venv/bin/python bench/graph_overhead.py --json     # machine-readable output

1. Per node: a linear Graph of ``NODES`` nodes, each a one-turn Agent on the
   zero-latency ``scripted`` model, against ``NODES`` separate asks of that Agent.
   The difference per node is what a node costs beyond its child run (its step,
   its commit, the routing). It is set against one Agent step's marginal cost
   (an Agent making ``TOOL_TURNS`` more tool turns), target <= 1.5x. Each round times every
   series ``REPEATS`` times and keeps the fastest; the ratio is the median over rounds of each
   round's node overhead against the same round's agent step.
2. Fan-out: a start node, four branches whose model waits ``BRANCH_SECONDS``, and a
   join, on a SQLite file store: the run's time over ``BRANCH_SECONDS`` (the
   branches run at once), target <= 30 ms.
3. Fan-out on workers: the same shape with branches of ``distbench.graph_app.BRANCH_SECONDS``
   (1 s), on a PostgreSQL store and Redis this script starts, with 2 worker processes
   (``lg.orchestrate`` and ``lg.model``, 4 threads each): the run's time against its
   slowest branch's (the branches run at once on both processes), target <= 1.1x.

Rounds are interleaved and medians are reported; the exit status is 0 whatever
the timings are (``--strict`` makes a missed target exit 1). See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distbench.graph_app import BRANCHES, WorkerFanOutGraph
from distbench.stack import BenchStack

from lg_core import Agent, Configuration, Graph, Tool, edge, with_configuration
from lg_core.assemblies.trajectory import Step
from lg_core.providers import scripted

NODES = 10
TOOL_TURNS = 10
BRANCH_SECONDS = 0.2
NODE_TARGET_RATIO = 1.5
FAN_OUT_TARGET_MS = 30.0
WORKERS_TARGET_RATIO = 1.1
WORKER_PROCESSES = 2


class NoteTool(Tool):
    tool_name = "note"
    description = "Take a note."

    def call(self, input: dict[str, Any]) -> str:
        return "noted"


def _tool_turns(request: Any) -> dict[str, Any]:
    done = sum(1 for message in request.messages if message.role == "tool")
    if done < TOOL_TURNS:
        return {"tool_calls": [{"name": "note", "arguments": {}}]}
    return {"text": "done"}


scripted.register("bench-graph-answer", [{"text": "answer"}])
scripted.register("bench-graph-tools", _tool_turns)
scripted.register("bench-graph-slow", lambda request: {"text": "branch", "delay": BRANCH_SECONDS})


class AnswerAgent(Agent):
    model = "scripted:bench-graph-answer"


class ToolTurnsAgent(Agent):
    model = "scripted:bench-graph-tools"
    tools = [NoteTool]


class SlowBranchAgent(Agent):
    model = "scripted:bench-graph-slow"


class LinearGraph(Graph):
    nodes = {f"n{i}": AnswerAgent for i in range(NODES)}
    start = "n0"
    edges = [edge(f"n{i}", f"n{i + 1}") for i in range(NODES - 1)]
    finish = f"n{NODES - 1}"


class FanOutGraph(Graph):
    nodes = {
        "start": AnswerAgent,
        "a": SlowBranchAgent,
        "b": SlowBranchAgent,
        "c": SlowBranchAgent,
        "d": SlowBranchAgent,
        "join": AnswerAgent,
    }
    start = "start"
    edges = [edge("start", ["a", "b", "c", "d"]), edge(["a", "b", "c", "d"], "join")]
    finish = "join"


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run = call()
    elapsed = time.perf_counter() - started
    if not run.completed:
        raise SystemExit(f"a benchmark run did not complete: {run.outcome} {run.error}")
    return elapsed


def _agents_one_by_one() -> Any:
    run = None
    for _ in range(NODES):
        run = AnswerAgent.ask("Go")
    return run


REPEATS = 5  # each quantity is timed this many times per round, interleaved; the round keeps the fastest


def _round(repeats: int) -> dict[str, float]:
    """One round of section 1: each series' fastest of ``repeats`` interleaved timings.

    The fastest is the timing least disturbed by the rest of the machine (timeit's advice); the
    series alternate inside the round so that a slow spell touches them all alike.
    """
    calls: dict[str, Callable[[], Any]] = {
        "graph": lambda: LinearGraph.ask("Go"),
        "agents": _agents_one_by_one,
        "agent_one_turn": lambda: AnswerAgent.ask("Go"),
        "agent_tool_turns": lambda: ToolTurnsAgent.ask("Go"),
    }
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeats):
        for name, call in calls.items():
            best[name] = min(best[name], _timed(call))
    return best


def _node_and_step_ms(timings: dict[str, float]) -> tuple[float, float]:
    """A round's overhead per graph node and per agent step, in ms."""
    node_ms = (timings["graph"] - timings["agents"]) / NODES * 1000
    # A tool turn is two steps (the tool call and the next model turn).
    step_ms = (timings["agent_tool_turns"] - timings["agent_one_turn"]) / (2 * TOOL_TURNS) * 1000
    return node_ms, step_ms


def measure(rounds: int, workdir: Path) -> dict[str, Any]:
    series: dict[str, list[float]] = {"graph": [], "agents": [], "agent_one_turn": [], "agent_tool_turns": []}
    ratios: list[float] = []
    fan_out: list[float] = []
    memory = Configuration()
    file_store = Configuration(run_store=f"sqlite:///{workdir / 'graph-bench.db'}")
    try:
        for number in range(rounds + 1):  # the first round warms up (imports, statement caches) and is dropped
            with with_configuration(memory):
                timings = _round(REPEATS)
            with with_configuration(file_store):
                fan_out.append(_timed(lambda: FanOutGraph.ask("Go")))
            if number == 0:
                continue
            for name, value in timings.items():
                series[name].append(value)
            node_ms, step_ms = _node_and_step_ms(timings)
            ratios.append(node_ms / step_ms if step_ms > 0 else float("inf"))
    finally:
        memory.close()
        file_store.close()
    median = {name: statistics.median(values) for name, values in series.items()}
    node_ms, step_ms = _node_and_step_ms(median)
    ratio = statistics.median(ratios)  # each round's node set against the same round's step
    fan_out_ms = (statistics.median(fan_out[1:]) - BRANCH_SECONDS) * 1000
    return {
        "rounds": rounds,
        "median_ms": {name: value * 1000 for name, value in median.items()},
        "graph_node_overhead_ms": node_ms,
        "agent_step_ms": step_ms,
        "ratios": {
            "graph node overhead / agent step (target <= 1.5)": ratio,
            "4-branch fan-out overhead over the slowest branch, ms (target <= 30)": fan_out_ms,
        },
        "targets_met": {
            "node": ratio <= NODE_TARGET_RATIO,
            "fan_out": fan_out_ms <= FAN_OUT_TARGET_MS,
        },
    }


def _seconds(step: Step) -> float:
    attempt = step.attempts[-1]
    return (attempt.finished_at - attempt.started_at).total_seconds()


def measure_on_workers(rounds: int) -> dict[str, Any]:
    """Section 3: the 4-branch graph on worker processes, its time against its slowest branch's."""
    stack = BenchStack(lease_seconds=10.0).start()
    configuration = stack.configuration()
    walls: list[float] = []
    slowest: list[float] = []
    try:
        with with_configuration(configuration):
            configuration.runtime()  # creates the schema before any worker opens the store
            for _ in range(WORKER_PROCESSES):
                stack.start_workers(("lg.orchestrate", "lg.model"), pool="threads", concurrency=4)
            for _ in range(rounds + 1):  # the first round warms the workers up and is dropped
                started = time.perf_counter()
                run = WorkerFanOutGraph.start_execution("Go").wait(timeout=120)  # every step on the workers
                walls.append(time.perf_counter() - started)
                if not run.completed or run.result is None:
                    raise SystemExit(f"a benchmark run on workers did not complete: {run.outcome} {run.error}")
                trajectory = run.result.trajectory
                slowest.append(max(_seconds(trajectory.find(name)) for name in BRANCHES))
    finally:
        configuration.close()
        stack.close()
    ratios = [wall / branch for wall, branch in zip(walls[1:], slowest[1:], strict=True)]
    return {
        "wall_ms": statistics.median(walls[1:]) * 1000,
        "slowest_branch_ms": statistics.median(slowest[1:]) * 1000,
        "ratio": statistics.median(ratios),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run: fewer rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--rounds", type=int, help="override the number of measured rounds")
    parser.add_argument("--dir", type=Path, help="where to put the SQLite file (default: a new temporary directory)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 9)
    with tempfile.TemporaryDirectory() as scratch:
        report = measure(rounds, args.dir or Path(scratch))
    workers = measure_on_workers(1 if args.quick else 5)
    report["on_workers"] = workers
    label = f"4-branch fan-out on {WORKER_PROCESSES} worker processes, run / slowest 1 s branch (target <= 1.1)"
    report["ratios"][label] = workers["ratio"]
    report["targets_met"]["workers"] = workers["ratio"] <= WORKERS_TARGET_RATIO
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, value in report["median_ms"].items():
            print(f"{name:>20}: {value:8.2f} ms (median of {rounds} rounds, each the fastest of {REPEATS})")
        print(f"graph node overhead: {report['graph_node_overhead_ms']:.3f} ms per node")
        print(f"agent step:          {report['agent_step_ms']:.3f} ms per step")
        wall, branch = workers["wall_ms"], workers["slowest_branch_ms"]
        print(f"on workers:          {wall:.1f} ms per run, slowest branch {branch:.1f} ms")
        for label, value in report["ratios"].items():
            print(f"{label}: {value:.2f}" if value is not None else f"{label}: n/a")
    if args.strict and not all(report["targets_met"].values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
