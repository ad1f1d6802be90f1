"""Agents for the session tests, at module level so any process can import them.

``RecallAgent``'s model answers ``seen: <every user message it was shown>``,
so a run's response proves which history it received. A user message that
starts with ``gate:NAME`` first makes it call the ``wait_for`` tool, which
blocks until the test opens that gate: that is how a test holds a run in the
middle of its turn without sleeping.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict

from lg_core import Agent, Tool, ToolError
from lg_core.providers import scripted

_entered: defaultdict[str, threading.Event] = defaultdict(threading.Event)
_released: defaultdict[str, threading.Event] = defaultdict(threading.Event)


def wait_until_entered(gate: str, timeout: float = 30) -> None:
    """Block until a run is inside ``wait_for(gate)``."""
    if not _entered[gate].wait(timeout):
        raise AssertionError(f"no run reached gate {gate!r} within {timeout} s")


def release(gate: str) -> None:
    _released[gate].set()


def reset() -> None:
    _entered.clear()
    _released.clear()


class WaitTool(Tool):
    tool_name = "wait_for"
    description = "Wait at a named gate."
    input_schema = {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]}

    def call(self, input):
        gate = input["gate"]
        _entered[gate].set()
        if not _released[gate].wait(60):
            raise ToolError(f"gate {gate} never opened")
        return f"passed {gate}"


class NoteTool(Tool):
    tool_name = "note"
    description = "Store key=value in the run's state and report the whole state."
    input_schema = {
        "type": "object",
        "properties": {"key": {"type": "string"}, "value": {"type": "string"}},
        "required": ["key", "value"],
    }

    def call(self, input):
        self.context.state[input["key"]] = input["value"]
        return json.dumps(self.context.state.to_dict(), sort_keys=True)


def _users(request) -> list[str]:
    return [m.text for m in request.messages if m.role == "user"]


def _recall(request) -> dict:
    last = request.messages[-1]
    if last.role == "user" and last.text.startswith("gate:"):
        return {"tool_calls": [{"name": "wait_for", "arguments": {"gate": last.text.split()[0][len("gate:") :]}}]}
    return {"text": "seen: " + " | ".join(_users(request)), "reasoning": "private thoughts about the user"}


def _note(request) -> dict:
    last = request.messages[-1]
    if last.role == "user" and "=" in last.text:
        key, _, value = last.text.partition("=")
        return {"tool_calls": [{"name": "note", "arguments": {"key": key.strip(), "value": value.strip()}}]}
    if last.role == "tool":
        return {"text": "state: " + last.tool_results[0].text}
    return {"text": "nothing to note"}


scripted.register("session-recall", _recall)
scripted.register("session-note", _note)


class RecallAgent(Agent):
    model = "scripted:session-recall"
    system_prompt = "You remember conversations."
    tools = [WaitTool]


class NoteAgent(Agent):
    model = "scripted:session-note"
    tools = [NoteTool]
