"""Agents used by the distributed tests; every worker imports this module (LG_IMPORTS).

Tools log each call to $DIST_APP_LOG ("<tool> <n> <idempotency key>") so tests
can prove which calls ran and how often. $DIST_APP_HANG names a call
("<tool>:<n>") that blocks after logging, and $DIST_APP_READY_DIR receives a
file "<tool>-<n>-<pid>" when it does, so a test can kill the process that
runs it mid-call.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from lg_core import Agent, Tool
from lg_core.providers import scripted

TURNS = 6


def _log(tool: str, n: int, key: str) -> None:
    path = os.environ.get("DIST_APP_LOG")
    if not path:
        return
    with open(path, "a") as handle:
        handle.write(f"{tool} {n} {key}\n")
        handle.flush()
        os.fsync(handle.fileno())


def _maybe_hang(tool: str, n: int) -> None:
    if os.environ.get("DIST_APP_HANG") == f"{tool}:{n}":
        ready = Path(os.environ["DIST_APP_READY_DIR"]) / f"{tool}-{n}-{os.getpid()}"
        ready.write_text(str(os.getpid()))
        threading.Event().wait(300)


class StepTool(Tool):
    description = "Record one numbered step."
    input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}

    def call(self, input):
        _log(self.tool_name, input["n"], self.idempotency_key)
        _maybe_hang(self.tool_name, input["n"])
        return f"step {input['n']} done"


class ChargeTool(StepTool):
    tool_name = "charge"
    description = "Charge the card; must never run twice."
    at_most_once = True


def _steps(tool: str, turns: int = TURNS) -> list[dict]:
    return [{"tool_calls": [{"name": tool, "arguments": {"n": n}}]} for n in range(turns)] + [{"text": "All steps recorded."}]


scripted.register("dist-steps", _steps("step"))
scripted.register("dist-charge", _steps("charge"))
scripted.register("dist-slow", [{"text": "A slow and thoughtful answer, streamed word by word.", "delay": 1.0}])
scripted.register("dist-echo", lambda request: {"text": "You said: " + request.messages[-1].text})


class StepAgent(Agent):
    model = "scripted:dist-steps"
    tools = [StepTool]


class ChargeAgent(Agent):
    model = "scripted:dist-charge"
    tools = [ChargeTool]


class SlowAgent(Agent):
    model = "scripted:dist-slow"


class EchoAgent(Agent):
    model = "scripted:dist-echo"
