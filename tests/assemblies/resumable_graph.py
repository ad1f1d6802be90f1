"""A Graph whose nodes' tool can raise KeyboardInterrupt once, as if its process died there.

Module level, so that ``lg_core.resume`` rebuilds the Graph run and its node's child
run from their import paths. Every tool call is counted by its idempotency key.
"""

from __future__ import annotations

from lg_core import Agent, Graph, Tool, edge
from lg_core.providers import scripted

CALLS: list[str] = []
INTERRUPT_AT: list[int] = []  # the 1-based call that raises KeyboardInterrupt (once)


class RecordTool(Tool):
    tool_name = "record"
    description = "Record a side effect; the call INTERRUPT_AT names stops the process."

    def call(self, input):
        CALLS.append(self.idempotency_key)
        if INTERRUPT_AT and INTERRUPT_AT[0] == len(CALLS):
            INTERRUPT_AT.pop()
            raise KeyboardInterrupt
        return "recorded"


def _reply(request):
    if request.messages[-1].role == "tool":
        return {"text": "done: " + request.messages[0].text[:20]}
    return {"tool_calls": [{"name": "record", "arguments": {}}]}


scripted.register("resumable-graph", _reply)


class FirstAgent(Agent):
    model = "scripted:resumable-graph"
    tools = [RecordTool]


class SecondAgent(Agent):
    model = "scripted:resumable-graph"
    tools = [RecordTool]


class ResumableGraph(Graph):
    nodes = {"first": FirstAgent, "second": SecondAgent}
    start = "first"
    edges = [edge("first", "second")]
    finish = "second"
