"""Builders make fixed, validated definitions, and a definition survives its stored form
(``to_dict`` / ``from_dict``): a run can store the one it started with and resume with it."""

from __future__ import annotations

import json

import pytest

from lg_core import AssemblyDefinition, ConfigurationError, Graph, GraphBuilder, RunStateError, SwarmBuilder, edge
from tests.assemblies import spec_examples as examples

CLASSES = [
    examples.ResponseWorkflow,
    examples.ProblemSolverSwarm,
    examples.SupportFlowGraph,
    examples.InvestigationGraph,
    examples.DeclaredJoinGraph,
    examples.RecoveringGraph,
    examples.ResolutionGraph,
]


def stored(definition):
    """The definition as a run stores it: JSON text, read back."""
    return AssemblyDefinition.from_dict(json.loads(json.dumps(definition.to_dict())))


@pytest.mark.parametrize("assembly", CLASSES, ids=lambda assembly: assembly.__name__)
def test_a_class_definition_round_trips_through_json(assembly):
    definition = assembly.definition()
    assert stored(definition) == definition


def test_a_lambda_declared_on_a_class_is_stored_as_its_place_in_that_class():
    data = examples.SupportFlowGraph.definition().to_dict()
    when = data["graph"]["edges"][0]["when"]
    assert when == {
        "declared_in": "tests.assemblies.spec_examples:SupportFlowGraph",
        "at": {"edge": "edge triage -> billing", "part": "when"},
    }
    assert stored(examples.SupportFlowGraph.definition()).spec.edges[0].when is examples.SupportFlowGraph.edges[0].when


def test_a_module_level_function_is_stored_by_its_import_path():
    data = examples.DeclaredJoinGraph.definition().to_dict()
    assert data["graph"]["edges"][1]["input"] == {"import": "tests.assemblies.spec_examples:incoming_as_json"}


def test_a_nested_builder_definition_is_stored_inside_its_parent():
    inner = SwarmBuilder(id="billing_desk").member(examples.BillingAgent).member(examples.AccountAgent)
    inner.start(examples.BillingAgent)
    inner.handoff(examples.BillingAgent, to=examples.AccountAgent)
    outer = GraphBuilder(id="outer").node("triage", examples.TriageAgent).node("desk", inner)
    outer.start("triage")
    outer.edge("triage", "desk")
    outer.finish("desk")
    definition = outer.definition()
    data = definition.to_dict()
    assert data["graph"]["nodes"][1]["assembly"]["definition"]["assembly_id"] == "billing_desk"
    assert stored(definition) == definition


def test_the_builder_of_the_guide_makes_a_graph_definition():
    graph = GraphBuilder(id="support_flow", description="Routes customer support requests")
    graph.node("triage", examples.TriageAgent)
    graph.node("respond", examples.CustomerSupportAgent)
    graph.start("triage")
    graph.edge("triage", "respond")
    graph.finish("respond")
    assert graph.validate() is graph
    definition = graph.definition()
    assert (definition.kind, definition.assembly_id, definition.description) == (
        "graph",
        "support_flow",
        "Routes customer support requests",
    )
    assert definition.implementation is Graph
    assert stored(definition) == definition


def test_each_definition_is_a_snapshot_and_later_builder_edits_change_later_ones_only():
    graph = (
        GraphBuilder(id="growing").node("triage", examples.TriageAgent).node("respond", examples.CustomerSupportAgent)
    )
    graph.start("triage")
    graph.edge("triage", "respond")
    graph.finish("respond")
    first = graph.definition()
    graph.node("billing", examples.BillingAgent).edge("triage", "billing", when=examples.incoming_as_json)
    graph.edge("billing", "respond")
    second = graph.definition()
    assert [item.name for item in first.spec.nodes] == ["triage", "respond"]
    assert [item.name for item in second.spec.nodes] == ["triage", "respond", "billing"]


def test_a_lambda_given_to_a_builder_cannot_be_stored_and_the_message_says_where_it_was_declared():
    graph = GraphBuilder(id="support_flow").node("triage", examples.TriageAgent)
    graph.node("billing", examples.BillingAgent).node("respond", examples.CustomerSupportAgent)
    graph.start("triage")
    graph.edge("triage", "billing", when=lambda state: True).edge("triage", "respond").edge("billing", "respond")
    graph.finish("respond")
    definition = graph.definition()  # valid: it runs in this process
    with pytest.raises(ConfigurationError, match=r"edge triage -> billing, when: .* is a lambda or a nested function"):
        definition.to_dict()


def test_a_builder_seeded_by_a_class_stores_the_class_lambdas_it_kept_but_not_one_it_replaced():
    builder = examples.SupportFlowGraph.to_builder()
    kept = builder.definition()
    assert kept.implementation is examples.SupportFlowGraph
    assert stored(kept) == kept
    builder._edges[0] = edge("triage", "billing", when=lambda state: False)
    with pytest.raises(ConfigurationError, match=r"edge triage -> billing, when"):
        builder.definition().to_dict()


def test_a_class_defined_in_a_function_cannot_be_named_in_a_stored_definition():
    class LocalGraph(Graph):
        nodes = {"only": examples.TriageAgent}
        start = "only"
        finish = "only"

    with pytest.raises(ConfigurationError, match=r"LocalGraph cannot be named by an import path"):
        LocalGraph.definition().to_dict()


def test_a_stored_place_the_class_no_longer_declares_is_a_run_state_error():
    data = examples.SupportFlowGraph.definition().to_dict()
    data["graph"]["edges"][0]["when"]["at"]["edge"] = "edge triage -> nowhere"
    with pytest.raises(RunStateError, match=r"SupportFlowGraph no longer declares the edge triage -> nowhere, when"):
        AssemblyDefinition.from_dict(data)


def test_a_stored_definition_of_an_unknown_format_is_refused():
    data = examples.SupportFlowGraph.definition().to_dict()
    with pytest.raises(RunStateError, match=r"format 99"):
        AssemblyDefinition.from_dict({**data, "format": 99})


def test_a_stored_definition_is_validated_again_when_read():
    data = examples.InvestigationGraph.definition().to_dict()
    data["graph"]["edges"] = data["graph"]["edges"][:3]  # policy loses its route to respond
    with pytest.raises(ConfigurationError, match=r"node policy has no route onward"):
        AssemblyDefinition.from_dict(data)


def test_a_definition_is_a_participant_of_another_declaration():
    definition = examples.ProblemSolverSwarm.definition()
    graph = GraphBuilder(id="wrapper").node("solve", definition)
    graph.start("solve")
    graph.finish("solve")
    assert graph.definition().spec.node_named("solve").assembly is definition


def test_a_graph_builder_seeded_by_a_class_starts_from_its_declarations_and_may_take_another_id():
    builder = examples.InvestigationGraph.to_builder()
    assert builder.definition().spec == examples.InvestigationGraph.definition().spec
    builder.assembly_id("investigation_v2")
    builder.description("Investigates with a bound of 2")
    builder.max_concurrency(2)
    definition = builder.definition()
    assert (definition.assembly_id, definition.description) == ("investigation_v2", "Investigates with a bound of 2")
    assert definition.spec.groups[0].max_concurrency == 2
    assert examples.InvestigationGraph.definition().spec.groups[0].max_concurrency == 8


def test_a_workflow_builder_seeded_by_a_class_keeps_the_class_perform():
    definition = examples.ResponseWorkflow.to_builder().definition()
    assert (definition.implementation, definition.spec.perform) == (examples.ResponseWorkflow, None)
    assert stored(definition) == definition


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: GraphBuilder(id="g", base=examples.ProblemSolverSwarm), r"base must be a graph class"),
        (lambda: GraphBuilder(id="Not An Id"), r"GraphBuilder id must be 1-64 lowercase"),
        (lambda: GraphBuilder(id="g", description=3), r"description must be a string"),  # type: ignore[arg-type]
        (lambda: GraphBuilder().max_steps(0), r"GraphBuilder.max_steps must be a positive integer"),
        (
            lambda: SwarmBuilder().max_handoff_repeats(-2),
            r"SwarmBuilder.max_handoff_repeats must be a positive integer",
        ),
        (lambda: GraphBuilder().validate(), r"GraphBuilder has no id"),
    ],
)
def test_a_builder_refuses_a_bad_value_where_it_is_given(make, message):
    with pytest.raises(ConfigurationError, match=message):
        make()
