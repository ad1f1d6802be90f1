"""The Graphs of the distributed assembly session and retry tests; workers import them by their paths.

``SettleGraph`` runs charge, confirm and notify one after the other, each node's Agent recording
its side effect once through graph_dist_app's ``effect`` tool (1, 2, 3). The confirm node's model
fails before its tool call while the file named by $ASSEMBLY_OUTAGE exists: an outage every worker
process sees, which the test ends by deleting the file before it retries the run.
``SettleWorkflow`` invokes the same Agents in the same order, and ``SettleSwarm``'s one member is
the confirm Agent. ``RecallGraph``'s one node answers with every user message it was given, so a test sees the
history its session handed it.
"""

from __future__ import annotations

import os

from graph_dist_app import EffectTool

from lg_core import Agent, Graph, Swarm, Workflow, edge
from lg_core.providers import scripted

EFFECTS = {"charge": 1, "confirm": 2, "notify": 3}


def _node_model(name: str):
    def reply(request):
        marker = os.environ.get("ASSEMBLY_OUTAGE")
        if name == "confirm" and marker and os.path.exists(marker):
            return {"error": {"kind": "http", "status": 503, "message": "the provider is down"}}
        if request.messages[-1].role == "tool":
            return {"text": f"{name} done"}
        return {"tool_calls": [{"name": "effect", "arguments": {"n": EFFECTS[name]}}]}

    return reply


for _name in EFFECTS:
    scripted.register(f"settle-{_name}", _node_model(_name))
scripted.register(
    "recall-node",
    lambda request: {"text": "seen: " + " | ".join(m.text for m in request.messages if m.role == "user")},
)


class ChargeAgent(Agent):
    model = "scripted:settle-charge"
    tools = [EffectTool]


class ConfirmAgent(Agent):
    model = "scripted:settle-confirm"
    tools = [EffectTool]


class NotifyAgent(Agent):
    model = "scripted:settle-notify"
    tools = [EffectTool]


class SettleGraph(Graph):
    nodes = {"charge": ChargeAgent, "confirm": ConfirmAgent, "notify": NotifyAgent}
    start = "charge"
    edges = [edge("charge", "confirm"), edge("confirm", "notify")]
    finish = "notify"


class SettleWorkflow(Workflow):
    def perform(self):
        charged = self.invoke(ChargeAgent)  # settled (and committed, as the step parks) before confirm starts
        confirmed = self.invoke(ConfirmAgent, input=charged.output)
        return self.invoke(NotifyAgent, input=confirmed.output)


class SettleSwarm(Swarm):
    members = [ConfirmAgent]
    start = ConfirmAgent


class RecallAgent(Agent):
    model = "scripted:recall-node"


class RecallGraph(Graph):
    nodes = {"answer": RecallAgent}
    start = "answer"
    finish = "answer"
