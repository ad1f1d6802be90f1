"""An application module for the crash tests: imported by the child process
that gets killed and by the process that resumes the run.

Each tool call appends "<n> <idempotency key>" to $KILL_APP_LOG. When $HANG_AT
names the current n, the tool announces itself in $KILL_APP_READY and blocks,
so the test can SIGKILL the process in the middle of that call.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from lg_core import Agent, Tool
from lg_core.providers import scripted

TURNS = 8


def _log_call(n: int, key: str) -> None:
    with open(os.environ["KILL_APP_LOG"], "a") as handle:
        handle.write(f"{n} {key}\n")
        handle.flush()
        os.fsync(handle.fileno())


def _maybe_hang(n: int) -> None:
    if os.environ.get("HANG_AT") == str(n):
        ready = Path(os.environ["KILL_APP_READY"])
        draft = ready.with_name(f".{ready.name}")  # renamed into place: a reader never sees it empty
        draft.write_text(str(os.getpid()))
        draft.rename(ready)
        threading.Event().wait(120)


class StepTool(Tool):
    description = "Record one numbered step."
    input_schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }

    def call(self, input):
        _log_call(input["n"], self.idempotency_key)
        _maybe_hang(input["n"])
        return f"step {input['n']} done"


class ChargeTool(StepTool):
    """Same, but a side effect that must never repeat."""

    tool_name = "charge"
    description = "Charge the card once."
    at_most_once = True


class NoteTool(Tool):
    """Write ``key`` into the working state; calls 0 and 1 run in parallel and both
    have written their copy before either returns (so before either commits)."""

    tool_name = "note"
    description = "Note a key in the working state."
    input_schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "key": {"type": "string"}, "delete": {"type": "string"}},
        "required": ["n", "key"],
        "additionalProperties": False,
    }
    pair = threading.Barrier(2, timeout=60)

    def call(self, input):
        _log_call(input["n"], self.idempotency_key)
        self.context.state[input["key"]] = input["n"]
        if "delete" in input:
            del self.context.state[input["delete"]]
        if input["n"] < 2:
            self.pair.wait()
        _maybe_hang(input["n"])
        return f"noted {input['key']}"


def _script(tool: str) -> list[dict]:
    turns = [{"tool_calls": [{"name": tool, "arguments": {"n": n}}]} for n in range(TURNS)]
    return turns + [{"text": "All steps recorded."}]


scripted.register("kill-steps", _script("step"))
scripted.register("kill-charge", _script("charge"))
scripted.register(
    "kill-notes",
    [
        {
            "tool_calls": [
                {"name": "note", "arguments": {"n": 0, "key": "a"}},
                {"name": "note", "arguments": {"n": 1, "key": "b"}},
            ]
        },
        {"tool_calls": [{"name": "note", "arguments": {"n": 2, "key": "c", "delete": "a"}}]},
        {"text": "All noted."},
    ],
)


class StepAgent(Agent):
    model = "scripted:kill-steps"
    tools = [StepTool]


class ChargeAgent(Agent):
    model = "scripted:kill-charge"
    tools = [ChargeTool]


class NoteAgent(Agent):
    model = "scripted:kill-notes"
    tools = [NoteTool]
