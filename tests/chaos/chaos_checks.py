"""What every chaos test proves about its runs, and how it kills and measures.

The invariants every chaos test checks: every run completes; no committed step
ran again; an at_most_once tool never ran twice (its interrupted call got the
"outcome unknown" result and a tool_outcome_unknown event); the durable event
log is gapless 1..N with exactly one terminal event, at the end.

"No committed step ran again" is checked against the store: a step can only
execute after a claim, and a claim needs an open step, so each logged call of
a step must have its own claim (calls <= attempts). A call may appear twice
only if its first execution was interrupted before its commit (attempts > 1).
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lg_core.engine._tool_call import OUTCOME_UNKNOWN

TERMINAL = {"run_stop", "run_error", "run_partial", "run_cancel"}


@dataclass
class Verdict:
    """What one scenario did, beyond the invariants it asserts."""

    runs: int = 0
    tool_calls: int = 0
    # interrupted idempotent calls that ran again / interrupted at_most_once calls
    repeated_calls: list[str] = field(default_factory=list)
    unknown_outcomes: list[str] = field(default_factory=list)
    model_retries: int = 0
    # runs that did not complete (lost or stuck) / broken invariants (duplicates, gaps)
    unfinished: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class Watchers:
    """Three readers of three runs, on threads: ``events()``, ``async for`` over it, and ``wait()``.

    Each records what it ended with (the last event's type, the run's outcome) or what it raised.
    """

    def __init__(self, executions: list) -> None:
        self._results: dict[str, str] = {}
        readers = {
            "events": lambda: [event.type for event in executions[0].events()][-1],
            "async events": lambda: asyncio.run(_last_event_async(executions[1])),
            "wait": lambda: executions[2].wait(timeout=120).outcome,
        }
        self._threads = [threading.Thread(target=self._watch, args=item, daemon=True) for item in readers.items()]
        for thread in self._threads:
            thread.start()

    def _watch(self, name: str, read) -> None:
        try:
            self._results[name] = read()
        except BaseException as exc:  # noqa: BLE001 - reported by results()
            self._results[name] = f"raised {exc!r}"

    def results(self, timeout: float) -> dict[str, str]:
        for thread in self._threads:
            thread.join(timeout)
        return self._results


async def _last_event_async(execution) -> str | None:
    last = None
    async for event in execution.events():
        last = event.type
    return last


def store_of(dist: Any) -> Any:
    return dist.config.runtime().store


def wait_ready(dist: Any, prefix: str, count: int, timeout: float = 60) -> list[int]:
    """Wait until ``count`` calls named ``prefix`` (e.g. "step-2") hang; returns their pids."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(Path(dist.ready_dir).glob(f"{prefix}-*"))
        if len(found) >= count:
            return [int(path.read_text()) for path in found]
        time.sleep(0.05)
    raise AssertionError(
        f"only {len(list(Path(dist.ready_dir).glob(prefix + '-*')))} of {count} calls {prefix} started"
    )


def wait_for_calls(dist: Any, count: int, timeout: float = 60) -> None:
    """Wait until ``count`` tool calls were logged, i.e. the runs are in the middle of their tool calls."""
    deadline = time.monotonic() + timeout
    while len(dist.calls()) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(dist.calls())} of {count} tool calls started in {timeout} s")
        time.sleep(0.05)


def kill_whole(worker: Any) -> None:
    """SIGKILL a worker and every pool child at once, as when its host or container dies."""
    children = worker.children()
    worker.kill(signal.SIGKILL)
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_all(executions: list[Any], timeout: float) -> None:
    """Wait for every run; a run still going at the deadline fails with its stored state, to diagnose it."""
    from lg_core.errors import DeadlineExceededError

    deadline = time.monotonic() + timeout
    for execution in executions:
        try:
            execution.wait(timeout=max(1.0, deadline - time.monotonic()))
        except DeadlineExceededError:
            raise AssertionError(_stuck_report(execution.run_id)) from None


def _stuck_report(run_id: str) -> str:
    from lg_core.runtime import current_runtime

    store = current_runtime().store
    record = store.load_run(run_id)
    open_steps = [
        (s.key, s.status, s.holder, s.attempts) for s in store.load_steps(run_id) if s.status not in ("succeeded",)
    ]
    events = [e.type for e in store.load_events(run_id)][-5:]
    return (
        f"run {run_id} did not finish: stored status {record.status}, "
        f"steps not succeeded {open_steps}, last events {events}"
    )


def next_commit_after(store: Any, run_id: str, moment: float) -> float | None:
    """Seconds from ``moment`` to the run's first step commit after it (from the store's timestamps)."""
    times = [s.finished_at for s in store.load_steps(run_id) if s.finished_at is not None and s.finished_at > moment]
    return min(times) - moment if times else None


def recovery_times(store: Any, run_ids: list[str], moment: float) -> list[float]:
    return sorted(t for t in (next_commit_after(store, r, moment) for r in run_ids) if t is not None)


def describe(times: list[float]) -> str:
    if not times:
        return "no commits"
    return f"min {times[0]:.2f} s, median {statistics.median(times):.2f} s, max {times[-1]:.2f} s (n={len(times)})"


def check_runs(dist: Any, turns: dict[str, int]) -> Verdict:
    """Check every invariant for the runs in ``turns`` (run id -> tool calls its script makes)."""
    store, verdict = store_of(dist), Verdict(runs=len(turns))
    # The records first, the call log after: a tool logs its call before its step commits, so
    # every call of a run read as completed is in the log even while other runs still execute
    # (read the other way round, a run finishing in between looked as if it skipped a call).
    records = {run_id: store.load_run(run_id) for run_id in turns}
    calls = [row for row in dist.calls() if row[2].split("/", 1)[0] in turns]
    verdict.tool_calls = len(calls)
    by_key = Counter(key for _tool, _n, key in calls)
    tools = {key: tool for tool, _n, key in calls}
    for run_id, count in turns.items():
        _check_run(store, records[run_id], count, calls, verdict)
    for key, n in by_key.items():
        run_id, step_key = key.split("/", 1)
        step = store.load_step(run_id, step_key)
        if step is None or n > step.attempts:
            verdict.problems.append(
                f"{key} ran {n} times but was claimed {step and step.attempts} times (a committed step ran again)"
            )
        if tools[key] == "charge" and n > 1:
            verdict.problems.append(f"at_most_once call {key} ran {n} times")
        if n > 1:
            verdict.repeated_calls.append(key)
    _check_models(dist, store, turns, verdict)
    return verdict


def _check_run(store: Any, record: Any, count: int, calls: list[tuple[str, int, str]], verdict: Verdict) -> None:
    run_id = record.id
    if record.status != "completed":
        verdict.unfinished.append(f"run {run_id} is {record.status}: {record.error}")
    events = store.load_events(run_id)
    seqs = [e.seq for e in events]
    # (event_seq is read before the events, so only a finished run must match it exactly)
    if seqs != list(range(1, len(seqs) + 1)) or (record.finished and record.event_seq != len(seqs)):
        verdict.problems.append(f"run {run_id} event log is not gapless 1..N: {seqs} (event_seq {record.event_seq})")
    terminal = [e for e in events if e.type in TERMINAL]
    if record.finished and (len(terminal) != 1 or events[-1].type not in TERMINAL):
        verdict.problems.append(f"run {run_id} has terminal events {[e.type for e in terminal]}")
    unknown_events = {e.data.get("step") for e in events if e.type == "tool_outcome_unknown"}
    unknown = [step for step in store.load_steps(run_id) if step.status == "unknown"]
    for step in unknown:
        verdict.unknown_outcomes.append(f"{run_id}/{step.key}")
        if OUTCOME_UNKNOWN not in str(step.result):
            verdict.problems.append(f"{run_id}/{step.key} is unknown but the model was not told: {step.result}")
        if step.key not in unknown_events:
            verdict.problems.append(f"{run_id}/{step.key} has an unknown outcome but no tool_outcome_unknown event")
    # Every call ran, except an at_most_once one whose process died after its start mark and
    # before the tool's first line ran: it is "unknown" without ever having run, which is allowed.
    ran = {n for _tool, n, key in calls if key.startswith(run_id + "/")}
    expected, never_ran = set(range(count)), {step.input["input"]["n"] for step in unknown}
    if record.status == "completed" and not (ran <= expected and expected - ran <= never_ran):
        verdict.problems.append(f"run {run_id} ran tool calls {sorted(ran)}, expected 0..{count - 1}")
    verdict.model_retries += sum(1 for e in events if e.type == "model_retry")


def _check_models(dist: Any, store: Any, turns: dict[str, int], verdict: Verdict) -> None:
    """Models of the chaos agents log their calls: each must have its own claim too."""
    path = Path(str(dist.log) + ".models")
    if not path.exists():
        return
    rows = Counter(tuple(line.split()[1:]) for line in path.read_text().splitlines())
    for (sequence, run_id), n in rows.items():
        if run_id not in turns:
            continue
        step = store.load_step(run_id, f"root/turn-{sequence}/model")
        if step is None or n > step.attempts:
            verdict.problems.append(
                f"model turn {sequence} of {run_id} ran {n} times, claimed {step and step.attempts}"
            )


__all__ = [
    "TERMINAL",
    "Verdict",
    "Watchers",
    "check_runs",
    "describe",
    "kill_whole",
    "next_commit_after",
    "recovery_times",
    "store_of",
    "wait_all",
    "wait_for_calls",
    "wait_ready",
]
