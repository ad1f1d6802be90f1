"""A Swarm whose members' tool can raise KeyboardInterrupt once, as if its process died there.

Module level, so that ``lg_core.resume`` rebuilds the Swarm run and its member's child run
from their import paths. Triage records a side effect and hands off to billing, which records
its own and answers. Every tool call is counted by its idempotency key.
"""

from __future__ import annotations

from lg_core import Agent, Swarm, Tool
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


def _triage(request):
    if request.messages[-1].role == "tool":
        return {"tool_calls": [{"name": "handoff", "arguments": {"to": "billing", "message": "two charges"}}]}
    return {"tool_calls": [{"name": "record", "arguments": {}}]}


def _billing(request):
    if request.messages[-1].role == "tool":
        return {"text": "billing: refund issued"}
    return {"tool_calls": [{"name": "record", "arguments": {}}]}


scripted.register("resumable-swarm-triage", _triage)
scripted.register("resumable-swarm-billing", _billing)


class ResumableTriageAgent(Agent):
    agent_id = "triage"
    model = "scripted:resumable-swarm-triage"
    tools = [RecordTool]


class ResumableBillingAgent(Agent):
    agent_id = "billing"
    model = "scripted:resumable-swarm-billing"
    tools = [RecordTool]


class ResumableSwarm(Swarm):
    members = [ResumableTriageAgent, ResumableBillingAgent]
    start = ResumableTriageAgent
    handoffs = {ResumableTriageAgent: [ResumableBillingAgent]}
