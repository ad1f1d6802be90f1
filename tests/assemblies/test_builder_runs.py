"""A builder is called as its class is (``ask``, ``stream_ask``, ``start_execution``), each call on a fixed
copy of its current declarations, stored with the run: edits after the start change later runs only, and a
callback no other process could import (a lambda) is refused before a run exists."""

from __future__ import annotations

import pytest

from lg_core import ConfigurationError, GraphBuilder, SwarmBuilder, WorkflowBuilder
from lg_core.providers import scripted
from lg_core.store import START_STEP
from tests.assemblies import spec_examples as examples


@pytest.fixture
def guide_models():
    names = {
        "triage": lambda request: {"text": "billing"},
        "billing": lambda request: {"text": "You were charged twice; a refund is on its way."},
        "ledger": lambda request: {"text": "The ledger entry is awaiting settlement."},
        "policy": lambda request: {"text": "Pending transfers settle within two business days."},
        "research": lambda request: {"text": "Transfer 481 is a pending authorization."},
        "support": lambda request: {"text": "answer: " + request.messages[-1].text.splitlines()[-1]},
    }
    for name, reply in names.items():
        scripted.register(name, reply)
    yield
    for name in names:
        scripted.unregister(name)


def compose(workflow):
    """A builder's composition, importable by path as a stored definition names it."""
    research = workflow.invoke(examples.ResearchAgent, as_="research").output
    return workflow.invoke(examples.CustomerSupportAgent, input=f"{workflow.input.text}\n{research}")


def triage_only(workflow):
    return workflow.invoke(examples.TriageAgent, as_="triage")


def _support_graph() -> GraphBuilder:
    graph = GraphBuilder(id="built_support").node("triage", examples.TriageAgent)
    graph.node("respond", examples.CustomerSupportAgent).start("triage")
    graph.edge("triage", "respond")
    graph.finish("respond")
    return graph


def test_a_built_graph_answers_and_stores_the_definition_it_ran(config, guide_models):
    graph = _support_graph()

    run = graph.ask("Why was I charged twice?")

    assert run.completed, run.error
    assert [step.participant for step in run.result.trajectory] == ["triage", "respond"]
    start = config.runtime().store.load_step(run.id, START_STEP)
    assert start.checkpoint["data"]["definition"] == graph.definition().to_dict()


def test_a_built_graph_edited_after_its_run_was_built_runs_as_it_was(config, guide_models):
    graph = _support_graph()
    run = graph.stream_ask("Why was I charged twice?")
    graph.node("billing", examples.BillingAgent).edge("respond", "billing")
    graph.finish("billing")

    run.call()

    assert [step.participant for step in run.result.trajectory] == ["triage", "respond"]
    assert [step.participant for step in graph.ask("Again?").result.trajectory] == ["triage", "respond", "billing"]


def test_a_built_swarm_hands_off(config):
    scripted.register(
        "triage", [{"tool_calls": [{"name": "handoff", "arguments": {"to": "billing", "message": "Two."}}]}]
    )
    scripted.register("billing", [{"text": "A hold."}])
    swarm = SwarmBuilder(id="built_solver").member(examples.TriageAgent).member(examples.BillingAgent)
    swarm.start(examples.TriageAgent)
    swarm.handoff(examples.TriageAgent, to=examples.BillingAgent)
    try:
        run = swarm.ask("Why was I charged twice?")
    finally:
        scripted.unregister("triage")
        scripted.unregister("billing")

    assert run.completed, run.error
    assert run.response == "A hold."


def test_a_built_workflow_runs_the_perform_it_started_with(config, guide_models):
    workflow = WorkflowBuilder(id="built_response")
    workflow.perform(compose)
    run = workflow.stream_ask("Why was I charged twice?")
    workflow.perform(triage_only)

    run.call()

    assert run.completed, run.error
    assert run.response == "answer: Transfer 481 is a pending authorization."
    assert [step.participant for step in workflow.ask("x").result.trajectory] == ["triage"]


def test_a_built_definition_runs_as_a_graph_node(config, guide_models):
    outer = GraphBuilder(id="outer").node("inner", _support_graph())
    outer.start("inner")
    outer.finish("inner")

    run = outer.ask("Why was I charged twice?")

    assert run.completed, run.error
    assert run.result.trajectory.find("inner").assembly_kind == "graph"


@pytest.mark.parametrize("call", ["ask", "stream_ask", "start_execution"])
def test_a_builder_lambda_is_refused_before_a_run_exists_naming_it_and_the_fix(config, call):
    workflow = WorkflowBuilder(id="built_lambda")
    workflow.perform(lambda flow: flow.invoke(examples.TriageAgent))

    with pytest.raises(ConfigurationError, match=r"workflow built_lambda: .*perform: .* module-level function"):
        getattr(workflow, call)("x")
    assert config.runtime().store.list_runs() == []
