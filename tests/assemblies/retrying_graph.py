"""A Graph whose one node fails its first attempt and whose second attempt's tool can stop the process.

Module level, so that ``lg_core.resume`` rebuilds the Graph run and its node's child runs
from their import paths. The model's first call of all raises a ProviderError (the node's
first attempt fails and is retried); every tool call is counted by its idempotency key, and
the call INTERRUPT_AT names raises KeyboardInterrupt once, as if the process died there.
"""

from __future__ import annotations

from lg_core import Agent, Graph, Tool, node
from lg_core.errors import ProviderError
from lg_core.providers import scripted

MODEL_CALLS: list[int] = []
CALLS: list[str] = []
INTERRUPT_AT: list[int] = []  # the 1-based tool call that raises KeyboardInterrupt (once)


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
    MODEL_CALLS.append(1)
    if len(MODEL_CALLS) == 1:
        return {"error": "provider down"}
    if request.messages[-1].role == "tool":
        return {"text": "looked up"}
    return {"tool_calls": [{"name": "record", "arguments": {}}]}


scripted.register("retrying-graph", _reply)


class LookupAgent(Agent):
    model = "scripted:retrying-graph"
    tools = [RecordTool]


class RetryingGraph(Graph):
    nodes = {"lookup": node(LookupAgent, retries=2, retry_on=ProviderError)}
    start = "lookup"
    finish = "lookup"
