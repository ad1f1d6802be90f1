"""Builder-made assemblies for the distributed tests: the workers never see these builders.

A builder's run stores the definition it started with (``AssemblyDefinition.to_dict``), which
names its Agents, conditions and ``perform`` function by import path; a worker imports them
from here and from graph_dist_app and swarm_dist_app (whose Agents record each side effect
through the ``effect`` tool), so a run made by a builder in the test process executes on the
workers as started, whatever the builder holds by then. The builders themselves are made by the
functions below, in the test process only.
"""

from __future__ import annotations

import graph_dist_app
import swarm_dist_app

from lg_core import GraphBuilder, SwarmBuilder, WorkflowBuilder


def findings(state) -> str:
    """The built Graph's fan-in mapper (stored by its import path): each branch's answer, by node."""
    return "\n".join(f"{name}: {result.output}" for name, result in sorted(state.incoming_results.items()))


def research_then_respond(workflow):
    """The built Workflow's composition: triage, then the ledger and policy at once, then the answer."""
    transfer = workflow.invoke(graph_dist_app.GraphTriageAgent, as_="triage").output
    findings = workflow.parallel(
        workflow.invoke(graph_dist_app.GraphLedgerAgent, input=transfer, as_="ledger"),
        workflow.invoke(graph_dist_app.GraphPolicyAgent, input=transfer, as_="policy"),
    )
    return workflow.invoke(graph_dist_app.GraphRespondAgent, input="\n".join(findings), as_="respond")


def respond_only(workflow):
    """Another composition, given to the builder after a run started: that run must not use it."""
    return workflow.invoke(graph_dist_app.GraphRespondAgent, as_="respond")


def transfer_graph() -> GraphBuilder:
    """triage, then ledger and policy in parallel, joined at respond (its input made by ``findings``)."""
    graph = GraphBuilder(id="built_transfer", description="The transfer investigation, built at runtime")
    graph.node("triage", graph_dist_app.GraphTriageAgent).node("ledger", graph_dist_app.GraphLedgerAgent)
    graph.node("policy", graph_dist_app.GraphPolicyAgent).node("respond", graph_dist_app.GraphRespondAgent)
    graph.start("triage")
    graph.edge("triage", ["ledger", "policy"])
    graph.edge(["ledger", "policy"], "respond", input=findings)
    graph.finish("respond")
    return graph


def charge_swarm() -> SwarmBuilder:
    swarm = SwarmBuilder(id="built_charge")
    swarm.member(swarm_dist_app.SwarmTriageAgent).member(swarm_dist_app.SwarmBillingAgent)
    swarm.start(swarm_dist_app.SwarmTriageAgent)
    swarm.handoff(swarm_dist_app.SwarmTriageAgent, to=swarm_dist_app.SwarmBillingAgent)
    swarm.max_steps(4)
    return swarm


def research_workflow() -> WorkflowBuilder:
    workflow = WorkflowBuilder(id="built_research")
    workflow.perform(research_then_respond)
    return workflow


def graph_of_a_built_swarm() -> GraphBuilder:
    """A built Graph whose one node is the built Swarm's definition: a child run of a definition, no class."""
    graph = GraphBuilder(id="built_charge_desk").node("solve", charge_swarm())
    graph.start("solve")
    graph.finish("solve")
    return graph
