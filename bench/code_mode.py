#!/usr/bin/env python
"""What code mode costs over the sandbox it runs in, on the real bwrap.

    .venv/bin/python bench/code_mode.py            # full run (about 30 s)
    .venv/bin/python bench/code_mode.py --quick    # smoke run
    .venv/bin/python bench/code_mode.py --json     # one JSON document

1. Exec: ``Session.execute`` of a trivial program end to end (temporary
   workspace, Bubblewrap sandbox, interpreter with the runtime, protocol, close)
   against the floor of the same backend running ``python3 -c pass`` over a new
   workspace (``Sandbox.execute_program``). Target <= 2x.
2. Brokered call: the time per tool call of a program making N calls to a
   no-op tool (minus the same program making none), against a direct
   ``Tool.execute`` of that tool. Target <= 2 ms over the direct call. It is
   measured twice: through a code-mode Agent's run (the scripted model calls
   ``exec``; each call takes the agent's tool path: a registry bound with the
   call's idempotency key, validation, callbacks, the shared call budget and
   an event), and at the Session with the Broker's plain dispatch.

Rounds interleave the measurement with its floor; the median is reported.
The exit status is 0 whatever the figures are (``--strict`` exits 1 on a miss).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lg_core import Agent
from lg_core.code_mode import Broker, Session
from lg_core.providers import scripted
from lg_core.sandboxes import Bubblewrap
from lg_core.tool import Tool
from lg_core.tool_registry import ToolRegistry
from lg_core.workspace import Workspace

POLICY = {"files": {"root": "read_write"}, "network": "none"}


class Noop(Tool):
    tool_name = "noop"
    description = "Returns its input."
    input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}

    def call(self, input):  # type: ignore[no-untyped-def]
        return input.get("n", 0)


def _factory(workspace: Workspace) -> Bubblewrap:
    return Bubblewrap(workspace=workspace, policy=POLICY)


def _exec_seconds(broker: Broker, source: str) -> float:
    with Session(broker, _factory, limits={"tool_calls": 10_000}) as session:
        started = time.perf_counter()
        result = session.execute(source)
        elapsed = time.perf_counter() - started
    assert result.status == "completed", result.error
    return elapsed


def _floor_seconds() -> float:
    directory = tempfile.mkdtemp(prefix="lg-bench-")
    try:
        started = time.perf_counter()
        workspace = Workspace(root=Path(directory) / "root").open()
        sandbox = _factory(workspace).open()
        execution = sandbox.execute_program(["/usr/bin/python3", "-c", "pass"], timeout=30)
        sandbox.close()
        workspace.close()
        elapsed = time.perf_counter() - started
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    assert execution.success, execution.stderr
    return elapsed


def _agent_run_seconds(source: str) -> float:
    """A code-mode Agent's whole run: one model turn calling exec with ``source``, one answering."""

    def turns(request):  # type: ignore[no-untyped-def]
        if request.messages[-1].role == "tool":
            return {"text": "done"}
        return {"tool_calls": [{"name": "exec", "id": "program", "arguments": {"code": source}}]}

    scripted.register("bench-code-mode", turns)

    class BenchAgent(Agent):
        model = "scripted:bench-code-mode"
        tools = [Noop]
        code_mode = {"sandbox": {"provider": "bubblewrap"}, "limits": {"tool_calls": 10_000}}
        limits = {"max_tool_calls": 10_000}

    try:
        started = time.perf_counter()
        run = BenchAgent.ask("bench")
        elapsed = time.perf_counter() - started
    finally:
        scripted.unregister("bench-code-mode")
    assert run.outcome == "completed", run.error
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--strict", action="store_true")
    options = parser.parse_args()
    rounds, calls = (3, 50) if options.quick else (10, 300)
    registry = ToolRegistry([Noop()])
    broker = Broker(registry)
    execs, floors, with_calls, without_calls = [], [], [], []
    agent_with_calls, agent_without_calls = [], []
    loop = f"for i in range({calls}):\n    tools.noop(n=i)\n"
    for round_number in range(rounds):
        pair: list[Callable[[], None]] = [
            lambda: execs.append(_exec_seconds(broker, "1")),
            lambda: floors.append(_floor_seconds()),
        ]
        for measure in pair if round_number % 2 == 0 else reversed(pair):
            measure()
        with_calls.append(_exec_seconds(broker, loop))
        without_calls.append(_exec_seconds(broker, "for i in range(0):\n    pass\n"))
        agent_with_calls.append(_agent_run_seconds(loop))
        agent_without_calls.append(_agent_run_seconds("for i in range(0):\n    pass\n"))
    tool = registry.fetch("noop")
    started = time.perf_counter()
    for i in range(calls):
        tool.execute({"n": i})
    direct = (time.perf_counter() - started) / calls
    brokered = (statistics.median(with_calls) - statistics.median(without_calls)) / calls
    through_agent = (statistics.median(agent_with_calls) - statistics.median(agent_without_calls)) / calls
    report = {
        "exec_seconds": statistics.median(execs),
        "bare_sandbox_python_seconds": statistics.median(floors),
        "exec_ratio": statistics.median(execs) / statistics.median(floors),
        "brokered_call_ms": through_agent * 1000,
        "direct_call_ms": direct * 1000,
        "broker_overhead_ms": (through_agent - direct) * 1000,
        "session_brokered_call_ms": brokered * 1000,
        "session_broker_overhead_ms": (brokered - direct) * 1000,
    }
    registry.close()
    if options.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"exec of a trivial program   {report['exec_seconds'] * 1000:8.1f} ms")
        print(f"bwrap python3 -c pass floor {report['bare_sandbox_python_seconds'] * 1000:8.1f} ms")
        print(f"ratio (target <= 2x)        {report['exec_ratio']:8.2f}x")
        print(f"brokered call (agent path)  {report['brokered_call_ms']:8.3f} ms")
        print(f"direct call                 {report['direct_call_ms']:8.3f} ms")
        print(f"overhead (target <= 2 ms)   {report['broker_overhead_ms']:8.3f} ms")
        print(f"brokered call (session)     {report['session_brokered_call_ms']:8.3f} ms")
        print(f"overhead at the session     {report['session_broker_overhead_ms']:8.3f} ms")
    missed = report["exec_ratio"] > 2 or report["broker_overhead_ms"] > 2
    return 1 if options.strict and missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
