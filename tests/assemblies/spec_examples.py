"""The guide's example Agents and assemblies ("Compose Agents"), declared at module level so that
their definitions can be stored and imported back by path."""

from __future__ import annotations

import json

from lg_core import Agent, Graph, Swarm, Workflow, edge, error_edge, member, node
from lg_core.errors import ProviderError


class TriageAgent(Agent):
    model = "scripted:triage"


class BillingAgent(Agent):
    model = "scripted:billing"


class AccountAgent(Agent):
    model = "scripted:account"


class CustomerSupportAgent(Agent):
    model = "scripted:support"


class ResearchAgent(Agent):
    model = "scripted:research"


class LedgerResearchAgent(Agent):
    model = "scripted:ledger"


class PolicyResearchAgent(Agent):
    model = "scripted:policy"


class RecoveryAgent(Agent):
    model = "scripted:recovery"


class ResponseWorkflow(Workflow):
    def perform(self):
        research = self.invoke(ResearchAgent, as_="research").output
        return self.invoke(CustomerSupportAgent, input=f"{self.input.text}\n\nVerified research:\n{research}")


class RoutedResponseWorkflow(Workflow):
    def perform(self):
        route = self.invoke(TriageAgent, as_="triage").output
        if route == "billing":
            return self.invoke(BillingAgent, as_="billing_response")
        return self.invoke(CustomerSupportAgent, as_="general_response")


class InvestigationWorkflow(Workflow):
    def perform(self):
        findings = self.parallel(self.invoke(LedgerResearchAgent), self.invoke(PolicyResearchAgent), max_concurrency=2)
        return self.invoke(CustomerSupportAgent, input=f"{self.input.text}\n\nFindings:\n" + "\n".join(findings))


class ProblemSolverSwarm(Swarm):
    members = [TriageAgent, BillingAgent, member(AccountAgent, history=True, context=True)]
    start = TriageAgent
    handoffs = {
        TriageAgent: [BillingAgent, AccountAgent],
        BillingAgent: [TriageAgent],
        AccountAgent: [TriageAgent],
    }
    max_steps = 10
    max_handoff_repeats = 2


class SupportFlowGraph(Graph):
    nodes = {
        "triage": TriageAgent,
        "billing": BillingAgent,
        "general": CustomerSupportAgent,
        "respond": CustomerSupportAgent,
    }
    start = "triage"
    edges = [
        edge("triage", "billing", when=lambda state: state.result("triage").output == "billing"),
        edge("triage", "general"),
        edge("billing", "respond"),
        edge("general", "respond"),
    ]
    finish = "respond"


class InvestigationGraph(Graph):
    nodes = {
        "triage": TriageAgent,
        "ledger": LedgerResearchAgent,
        "policy": PolicyResearchAgent,
        "respond": CustomerSupportAgent,
    }
    start = "triage"
    edges = [
        edge("triage", "ledger"),
        edge("triage", "policy"),
        edge("ledger", "respond"),
        edge("policy", "respond"),
    ]
    finish = "respond"


def incoming_as_json(state):
    """The fan-in mapper of the guide: every branch's output, by node name."""
    return json.dumps({name: result.output for name, result in state.incoming_results.items()})


class DeclaredJoinGraph(Graph):
    """The guide's explicit group: a bounded fan-out and a wait-for-all fan-in with its own mapper."""

    nodes = InvestigationGraph.nodes
    start = "triage"
    max_concurrency = 4
    edges = [
        edge(
            "triage",
            ["ledger", "policy"],
            max_concurrency=2,
            input=lambda state: f"Investigate this transfer:\n{state.result('triage').output}",
        ),
        edge(["ledger", "policy"], "respond", input=incoming_as_json),
    ]
    finish = "respond"


class RecoveringGraph(Graph):
    """A node with a retry policy and an error edge to a recovery node."""

    nodes = {
        "lookup": node(BillingAgent, timeout=15, retries=2, retry_on=[ProviderError], retry_delay=0.25),
        "recover": RecoveryAgent,
        "respond": CustomerSupportAgent,
    }
    start = "lookup"
    edges = [
        edge("lookup", "respond"),
        error_edge("lookup", "recover", on=ProviderError, input=lambda state: f"Recover from: {state.error}"),
        edge("recover", "respond"),
    ]
    finish = "respond"


class ResolutionGraph(Graph):
    nodes = {"investigate": InvestigationWorkflow, "resolve": ProblemSolverSwarm}
    start = "investigate"
    edges = [edge("investigate", "resolve")]
    finish = "resolve"


__all__ = [
    "AccountAgent",
    "BillingAgent",
    "CustomerSupportAgent",
    "DeclaredJoinGraph",
    "InvestigationGraph",
    "InvestigationWorkflow",
    "LedgerResearchAgent",
    "PolicyResearchAgent",
    "ProblemSolverSwarm",
    "RecoveringGraph",
    "RecoveryAgent",
    "ResearchAgent",
    "ResolutionGraph",
    "ResponseWorkflow",
    "RoutedResponseWorkflow",
    "SupportFlowGraph",
    "TriageAgent",
]
