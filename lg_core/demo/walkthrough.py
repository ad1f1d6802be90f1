"""The narrated ``lg demo``: a streamed answer, then a run that survives SIGKILL.

1. ``SupportAgent`` streams an answer: text deltas as they arrive, the tool
   call as it starts and finishes (in-memory store).
2. A child process (``python -m lg_core.demo.crash``) starts
   ``DurableSupportAgent`` on a SQLite file store; its help-center tool
   SIGKILLs the child during the third lookup, after two lookups committed.
3. This process reads the store: the run is ``running`` with its committed
   steps and one open tool step.
4. ``lg_core.resume(run_id)`` continues it here, streaming the rest.
5. The tool journal (one line per execution, with the pid) proves that the
   committed calls ran once and only the interrupted call ran again.

Returns exit code 0 when the resumed run completed and the proof holds.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import lg_core
from lg_core.cli_output import EventPrinter, report_outcome, status_text, steps_table, stream_run
from lg_core.config import build_configuration, with_configuration
from lg_core.demo import support
from lg_core.invocation import new_id
from lg_core.lease_holders import holder_is_dead
from lg_core.store import StepRecord

QUESTION = "Can I get a refund for my order?"
CHILD_TIMEOUT = 60.0


@dataclass
class Crash:
    """What the child process left behind."""

    store: str
    journal: Path
    run_id: str
    child_pid: int = 0
    returncode: int | None = None
    committed: tuple[str, ...] = ()  # topics whose tool steps committed before the kill
    interrupted: tuple[str, ...] = ()  # topics of tool steps left open


def run_demo(console: Console, directory: Path | None = None) -> int:
    started = time.monotonic()
    console.rule("[bold]LittleGhost demo[/]: offline, a scripted model, no API key, no server")
    streamed = stream_answer(console)
    with workspace(directory) as root:
        run_id = new_id()  # a UUIDv7: its first digits are the time, its last ones random
        crash = Crash(
            store=f"sqlite:///{root / 'runs.db'}",
            journal=root / f"tool-calls-{run_id[-8:]}.log",
            run_id=run_id,
        )
        ok = crash_child(console, crash) and inspect_store(console, crash)
        ok = ok and resume_and_prove(console, crash)
        closing(console, crash, keep=directory is not None)
    ok = ok and streamed
    verdict = "[bold green]demo succeeded[/]" if ok else "[bold red]demo failed[/]"
    console.print(f"\n{verdict} in {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


def heading(console: Console, number: int, title: str) -> None:
    console.print()
    console.rule(f"[bold]{number}. {title}[/]", align="left")


@contextmanager
def workspace(directory: Path | None) -> Iterator[Path]:
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        yield directory.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="lg-demo-") as tmp:
        yield Path(tmp)


# -- 1. streaming --------------------------------------------------------------------------


def stream_answer(console: Console) -> bool:
    heading(console, 1, "Streaming an answer")
    console.print(f"[dim]SupportAgent.stream_ask({QUESTION!r})[/]")
    config = build_configuration(run_store="sqlite://")
    try:
        with with_configuration(config):
            run = stream_run(support.SupportAgent.stream_ask(QUESTION), console, console)
    finally:
        config.close()
    return report_outcome(run, console) == 0


# -- 2. the crash --------------------------------------------------------------------------


def crash_child(console: Console, crash: Crash) -> bool:
    heading(console, 2, "A run in a child process that SIGKILLs itself mid-run")
    console.print(f"run store     {escape(crash.store)}", soft_wrap=True)
    console.print(
        f"tool journal  {escape(str(crash.journal))}  (every lookup appends 'topic pid')",
        soft_wrap=True,
    )
    command = [
        sys.executable,
        "-m",
        "lg_core.demo.crash",
        "--store",
        crash.store,
        "--journal",
        str(crash.journal),
        "--run-id",
        crash.run_id,
    ]
    console.print(f"[dim]$ python -m lg_core.demo.crash --store ... --run-id {escape(shlex.quote(crash.run_id))}[/]")
    stderr_path = crash.journal.with_suffix(".child-stderr")
    with open(stderr_path, "w+", encoding="utf-8") as stderr:
        crash.child_pid, crash.returncode = relay_child(console, command, stderr)
        stderr.seek(0)
        errors = stderr.read().strip()
    if crash.returncode == -signal.SIGKILL:
        console.print(f"[bold red]child exited with code {crash.returncode} (killed by SIGKILL)[/]")
        return True
    console.print(f"[red]expected the child to die of SIGKILL (-9), it exited with {crash.returncode}[/]")
    if errors:
        console.print(escape(errors), soft_wrap=True)
    return False


def relay_child(console: Console, command: list[str], stderr: IO[str]) -> tuple[int, int]:
    """Run ``command``, echoing its output indented; (pid, returncode)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    watchdog = threading.Timer(CHILD_TIMEOUT, process.kill)
    watchdog.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            console.print(f"  [dim]|[/] {escape(line.rstrip())}", soft_wrap=True)
        return process.pid, process.wait()
    finally:
        watchdog.cancel()


# -- 3. the store after the crash ----------------------------------------------------------


def inspect_store(console: Console, crash: Crash) -> bool:
    heading(console, 3, "The run store after the crash")
    config = build_configuration(run_store=crash.store)
    try:
        store = config.runtime().store
        record = store.load_run(crash.run_id)
        steps = [s for s in store.load_steps(crash.run_id) if s.kind != "start"]
    finally:
        config.close()
    gone = " (that process is gone)" if holder_is_dead(record.holder) else ""
    console.print(f"stored status after the crash: {status_text(record.status)}", soft_wrap=True)
    console.print(f"held by {escape(str(record.holder))}{gone}", soft_wrap=True)
    console.print(steps_table(steps, attempts=False))
    tools = [s for s in steps if s.kind == "tool"]
    crash.committed = tuple(_topic(s) for s in tools if s.status == "succeeded")
    crash.interrupted = tuple(_topic(s) for s in tools if s.status in ("scheduled", "running"))
    console.print(
        f"{sum(s.status == 'succeeded' for s in steps)} steps committed "
        f"(tool calls: {', '.join(crash.committed) or 'none'}); open: {', '.join(crash.interrupted) or 'none'}"
    )
    return record.status == "running" and bool(crash.committed) and bool(crash.interrupted)


# -- 4. resume and 5. proof ----------------------------------------------------------------


def resume_and_prove(console: Console, crash: Crash) -> bool:
    heading(console, 4, f"Resuming in this process (pid {os.getpid()}): lg_core.resume(run_id)")
    config = build_configuration(run_store=crash.store)
    try:
        with with_configuration(config):
            runtime = lg_core.current_runtime()
            printer = EventPrinter(console)
            unsubscribe = runtime.engine.bus.subscribe(crash.run_id, printer)
            try:
                run = lg_core.resume(crash.run_id)
            finally:
                unsubscribe()
                printer.finish()
            completed = report_outcome(run, console) == 0
            stored = runtime.store.load_run(crash.run_id).status
    finally:
        config.close()
    console.print(f"stored status after the resume: {status_text(stored)}")
    return prove(console, crash) and completed and stored == "completed"


def prove(console: Console, crash: Crash) -> bool:
    heading(console, 5, "Proof from the tool journal")
    entries = support.read_journal(str(crash.journal))
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("#", "LOOKUP", "PID", "PROCESS"):
        table.add_column(name)
    for index, (topic, pid) in enumerate(entries, 1):
        who = "child (killed)" if pid == crash.child_pid else "this process (resume)" if pid == os.getpid() else "other"
        table.add_row(str(index), topic, str(pid), who)
    console.print(table)
    counts = Counter(topic for topic, _ in entries)
    once = all(counts[t] == 1 for t in crash.committed)
    pids = {t: [pid for topic, pid in entries if topic == t] for t in crash.interrupted}
    again = all(p == [crash.child_pid, os.getpid()] for p in pids.values()) and set(counts) == {
        *crash.committed,
        *crash.interrupted,
    }
    check(console, once, f"committed tool calls ran exactly once: {', '.join(crash.committed)}")
    shown = "; ".join(f"{t} (child pid {crash.child_pid}, then pid {os.getpid()})" for t in crash.interrupted)
    check(console, again, f"only the call interrupted by the kill ran again: {shown}")
    return once and again


def check(console: Console, ok: bool, text: str) -> None:
    console.print(f"{'[bold green]PASS[/]' if ok else '[bold red]FAIL[/]'} {escape(text)}", soft_wrap=True)


def closing(console: Console, crash: Crash, keep: bool) -> None:
    console.print()
    if keep:
        console.print("Inspect the stored run:", soft_wrap=True)
        for command in ("show", "events"):
            line = shlex.join(["lg", "runs", command, crash.run_id, "--store", crash.store])  # pastes into a shell
            console.print(f"  {escape(line)}", soft_wrap=True)
    else:
        console.print(
            "Keep the store to inspect it with `lg runs show/events`: lg demo --dir ./lg-demo",
            soft_wrap=True,
        )
    console.print(
        f"Ask the agent yourself: {escape(shlex.join(['lg', 'ask', 'lg_core.demo.support:SupportAgent', QUESTION]))}",
        soft_wrap=True,
    )


def _topic(step: StepRecord) -> str:
    """The topic a tool step of the demo looked up (every demo tool call records its input)."""
    assert step.input is not None
    return str(step.input["input"]["topic"])


__all__ = ["run_demo"]
