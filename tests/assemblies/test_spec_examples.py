"""Every example assembly of the guide ("Compose Agents") declares and validates as written."""

from __future__ import annotations

import pytest

from lg_core import Assembly, AssemblyDefinition, ConfigurationError, Graph, Swarm, Workflow
from tests.assemblies import spec_examples as examples

EXAMPLES = [
    (examples.ResponseWorkflow, "workflow", "response"),
    (examples.RoutedResponseWorkflow, "workflow", "routed_response"),
    (examples.InvestigationWorkflow, "workflow", "investigation"),
    (examples.ProblemSolverSwarm, "swarm", "problem_solver"),
    (examples.SupportFlowGraph, "graph", "support_flow"),
    (examples.InvestigationGraph, "graph", "investigation"),
    (examples.DeclaredJoinGraph, "graph", "declared_join"),
    (examples.RecoveringGraph, "graph", "recovering"),
    (examples.ResolutionGraph, "graph", "resolution"),
]


@pytest.mark.parametrize(
    ("assembly", "kind", "assembly_id"), EXAMPLES, ids=lambda value: getattr(value, "__name__", "")
)
def test_a_guide_example_validates_with_its_kind_and_an_id_without_the_kind_suffix(assembly, kind, assembly_id):
    assert assembly.validate() is assembly
    definition = assembly.definition()
    assert isinstance(definition, AssemblyDefinition)
    assert (definition.kind, definition.assembly_id, definition.implementation) == (kind, assembly_id, assembly)
    assert assembly.assembly_kind == kind and assembly.assembly_id == assembly_id


def test_the_definition_is_fixed_when_the_class_is_defined():
    assert examples.SupportFlowGraph.definition() is examples.SupportFlowGraph.definition()


def test_support_flow_routes_triage_by_condition_with_one_fallback_and_no_parallel_group():
    spec = examples.SupportFlowGraph.definition().spec
    assert (spec.start, spec.finish) == ("triage", "respond")
    routes = spec.routes_from("triage")
    assert [(route.target, route.conditional) for route in routes] == [("billing", True), ("general", False)]
    assert spec.groups == ()


def test_investigation_graph_infers_a_parallel_group_joining_at_respond():
    (group,) = examples.InvestigationGraph.definition().spec.groups
    assert (group.source, group.heads, group.join) == ("triage", ("ledger", "policy"), "respond")
    assert group.branches == (("ledger",), ("policy",))
    assert group.feeding == ("ledger", "policy")
    assert group.max_concurrency == 8 and group.fan_out is None and group.fan_in is None


def test_a_declared_group_keeps_its_own_bound_and_the_fan_in_edge_with_its_mapper():
    (group,) = examples.DeclaredJoinGraph.definition().spec.groups
    assert group.max_concurrency == 2  # the edge's bound overrides the graph's max_concurrency = 4
    assert group.fan_out is not None and group.fan_out.targets == ("ledger", "policy")
    assert group.fan_in is not None and group.fan_in.input is examples.incoming_as_json
    assert group.join == "respond"


def test_problem_solver_swarm_names_members_by_agent_id_and_keeps_the_opt_ins():
    spec = examples.ProblemSolverSwarm.definition().spec
    assert [item.name for item in spec.members] == ["triage", "billing", "account"]
    assert spec.start == "triage"
    assert spec.routes() == [("triage", "billing"), ("triage", "account"), ("billing", "triage"), ("account", "triage")]
    assert (spec.max_steps, spec.max_handoff_repeats) == (10, 2)
    account = spec.member_named("account")
    assert (account.history, account.context) == (True, True)
    assert (spec.member_named("billing").history, spec.member_named("billing").context) == (False, False)


def test_a_node_keeps_its_retry_policy_and_the_error_edge_its_classes():
    spec = examples.RecoveringGraph.definition().spec
    policy = spec.node_named("lookup").policy
    assert (policy.timeout, policy.retries, policy.retry_on, policy.retry_delay) == (
        15.0,
        2,
        (examples.ProviderError,),
        0.25,
    )
    (recovery,) = spec.error_edges
    assert (recovery.source, recovery.target, recovery.on) == ("lookup", "recover", (examples.ProviderError,))


def test_resolution_graph_nests_a_workflow_and_a_swarm():
    spec = examples.ResolutionGraph.definition().spec
    assert spec.node_named("investigate").assembly is examples.InvestigationWorkflow
    assert spec.node_named("resolve").assembly is examples.ProblemSolverSwarm


def test_the_kinds_share_the_assembly_base_and_name_the_spec_value_types():
    assert all(issubclass(kind, Assembly) for kind in (Workflow, Swarm, Graph))
    assert Graph.State.__name__ == "GraphState"
    assert Workflow.Invocation.__name__ == "WorkflowInvocation"
    assert (Assembly.Step.__name__, Assembly.Attempt.__name__, Assembly.Trajectory.__name__) == (
        "Step",
        "Attempt",
        "Trajectory",
    )


@pytest.mark.parametrize(
    ("base", "message"),
    [
        (Graph, "declares no nodes"),
        (Swarm, "declares no members"),
        (Workflow, "defines no perform"),
    ],
)
def test_an_abstract_subclass_is_allowed_but_does_not_validate(base, message):
    abstract = type("SharedBase" + base.__name__, (base,), {"__module__": __name__})
    with pytest.raises(ConfigurationError, match=message):
        abstract.validate()


def test_a_subclass_of_a_complete_graph_is_validated_again_with_what_it_changes():
    class WiderInvestigationGraph(examples.InvestigationGraph):
        max_concurrency = 3

    (group,) = WiderInvestigationGraph.definition().spec.groups
    assert group.max_concurrency == 3
    assert WiderInvestigationGraph.definition().implementation is WiderInvestigationGraph


@pytest.mark.parametrize(
    ("base", "attribute", "message"),
    [
        (Graph, "model", r"declares `model`, which a graph does not read: that is an Agent declaration"),
        (Swarm, "tools", r"declares `tools`, which a swarm does not read: that is an Agent declaration"),
        (Workflow, "system_prompt", r"which a workflow does not read: that is an Agent declaration"),
        (Graph, "members", r"declares `members`, which a graph does not read: that is a Swarm declaration"),
        (Swarm, "edges", r"declares `edges`, which a swarm does not read: that is a Graph declaration"),
        (Workflow, "nodes", r"that is a Graph declaration; a Workflow composes its calls in perform"),
        (Workflow, "max_steps", r"a Workflow composes its calls in perform"),
    ],
)
def test_a_declaration_the_kind_does_not_read_is_refused_instead_of_ignored(base, attribute, message):
    with pytest.raises(ConfigurationError, match=message):
        type("Confused" + base.__name__, (base,), {"__module__": __name__, attribute: "x"})
