"""A Swarm for the distributed tests: triage records a side effect and hands off to billing, which
records its own and answers.

Workers import it by the Swarm's or a member Agent's path when they first meet one of its runs.
Each member's Agent calls ``effect`` (graph_dist_app's tool: logged to $DIST_APP_LOG, and able
to hang with $DIST_APP_HANG="effect:<n>") once with its number, then hands off or answers with
a fixed text, so an undisturbed run and a disturbed one give the same answer.
"""

from __future__ import annotations

from graph_dist_app import EffectTool

from lg_core import Agent, Graph, Swarm
from lg_core.providers import scripted

MEMBERS = {"triage": 1, "billing": 2}
HANDOFF_NOTE = "The customer sees two charges for transfer 481."
ANSWER = "You were charged once; the second line is a pending hold that drops off in two days."


def _triage(request):
    if request.messages[-1].role == "tool":
        return {"tool_calls": [{"name": "handoff", "arguments": {"to": "billing", "message": HANDOFF_NOTE}}]}
    return {"text": "Routing you.", "tool_calls": [{"name": "effect", "arguments": {"n": MEMBERS["triage"]}}]}


def _billing(request):
    if request.messages[-1].role == "tool":
        return {"text": ANSWER}
    return {"tool_calls": [{"name": "effect", "arguments": {"n": MEMBERS["billing"]}}]}


scripted.register("swarm-triage", _triage)
scripted.register("swarm-billing", _billing)


class SwarmTriageAgent(Agent):
    agent_id = "triage"
    model = "scripted:swarm-triage"
    description = "Routes the request."
    tools = [EffectTool]


class SwarmBillingAgent(Agent):
    agent_id = "billing"
    model = "scripted:swarm-billing"
    description = "Charges, refunds and invoices."
    tools = [EffectTool]


class ChargeSwarm(Swarm):
    members = [SwarmTriageAgent, SwarmBillingAgent]
    start = SwarmTriageAgent
    handoffs = {SwarmTriageAgent: [SwarmBillingAgent], SwarmBillingAgent: [SwarmTriageAgent]}
    max_steps = 4


class ChargeGraph(Graph):
    """A Graph whose one node is the Swarm: the Swarm run is a child run on the workers too."""

    nodes = {"solve": ChargeSwarm}
    start = "solve"
    finish = "solve"
