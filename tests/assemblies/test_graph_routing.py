"""After a node completes, a Graph takes the one matching conditional route, else its unconditional
fallback; two matching routes, or none and no fallback, is an AssemblyRoutingError; the finish node
ends the Graph; a fan-out goes to every branch, and a fan-in route is reported as a join."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lg_core import AssemblyRoutingError, Graph, edge
from lg_core.assemblies.graph_routing import route_after
from lg_core.assemblies.graph_state import GraphState
from tests.assemblies.spec_examples import InvestigationGraph, SupportFlowGraph, TriageAgent


@dataclass(frozen=True)
class Done:
    """What a completed node left: the part of a RunResult the conditions below read."""

    output: str


def after(node_name: str, output: str) -> GraphState:
    return GraphState(input=None, results={node_name: Done(output)}, current=node_name)


def spec_of(graph: type[Graph]):
    return graph.definition().spec


def declare(edges, nodes=("a", "b", "c", "end")):
    """A Graph of ``nodes`` (all one Agent) from a to end with ``edges``."""
    body = {
        "__module__": __name__,
        "nodes": dict.fromkeys(nodes, TriageAgent),
        "edges": edges,
        "start": "a",
        "finish": "end",
    }
    return type("RoutingGraph", (Graph,), body)


def test_the_matching_condition_picks_the_next_node():
    route = route_after(spec_of(SupportFlowGraph), "triage", after("triage", "billing"))

    assert route.targets == ("billing",)
    assert not route.finish


def test_no_matching_condition_takes_the_unconditional_fallback():
    route = route_after(spec_of(SupportFlowGraph), "triage", after("triage", "question"))

    assert route.targets == ("general",)


def test_a_node_with_only_one_route_takes_it():
    route = route_after(spec_of(SupportFlowGraph), "billing", after("billing", "refunded"))

    assert route.targets == ("respond",)


def test_the_finish_node_ends_the_graph():
    route = route_after(spec_of(SupportFlowGraph), "respond", after("respond", "done"))

    assert route.finish
    assert route.targets == ()


def test_two_matching_conditions_are_a_routing_error_naming_both_edges():
    graph = declare(
        [
            edge("a", "b", when=lambda state: True),
            edge("a", "c", when=lambda state: True),
            edge("a", "end"),
            edge("b", "end"),
            edge("c", "end"),
        ]
    )

    with pytest.raises(AssemblyRoutingError, match=r"edge a -> b, edge a -> c"):
        route_after(spec_of(graph), "a", after("a", "x"))


def test_no_match_and_no_fallback_is_a_routing_error():
    graph = declare(
        [
            edge("a", "b", when=lambda state: state.result("a").output == "b"),
            edge("a", "c", when=lambda state: state.result("a").output == "c"),
            edge("b", "end"),
            edge("c", "end"),
        ]
    )

    with pytest.raises(AssemblyRoutingError, match="no conditional route matched"):
        route_after(spec_of(graph), "a", after("a", "neither"))


def test_conditions_read_the_frozen_state_and_cannot_change_it():
    seen = []

    def condition(state):
        seen.append(state.result("a").output)
        with pytest.raises(TypeError):
            state.results["a"] = Done("changed")  # type: ignore[index]
        return True

    graph = declare([edge("a", "b", when=condition), edge("a", "end"), edge("b", "end")], nodes=("a", "b", "end"))

    assert route_after(spec_of(graph), "a", after("a", "seen")).targets == ("b",)
    assert seen == ["seen"]


def test_a_condition_that_raises_fails_routing_with_its_own_error():
    def broken(state):
        raise LookupError("no such field")

    graph = declare([edge("a", "b", when=broken), edge("a", "end"), edge("b", "end")], nodes=("a", "b", "end"))

    with pytest.raises(LookupError, match="no such field"):
        route_after(spec_of(graph), "a", after("a", "x"))


def test_an_inferred_fan_out_goes_to_every_branch_and_each_branch_reports_its_join():
    spec = spec_of(InvestigationGraph)

    fan_out = route_after(spec, "triage", after("triage", "x"))
    branch = route_after(spec, "ledger", after("ledger", "x"))

    assert fan_out.targets == ("ledger", "policy")
    assert branch.targets == ("respond",)


def test_a_declared_fan_in_route_is_a_join():
    graph = declare([edge("a", ("b", "c")), edge(("b", "c"), "end")])

    route = route_after(spec_of(graph), "b", after("b", "x"))

    assert route.targets == ("end",)
    assert [item.label for item in route.joins] == ["edge [b, c] -> end"]
