"""A Graph that cannot run as declared fails when its class is defined (and in ``validate()`` of a
builder), with a ConfigurationError naming the node or edge at fault."""

from __future__ import annotations

import pytest

from lg_core import ConfigurationError, Graph, GraphBuilder, edge, error_edge, node
from tests.assemblies.spec_examples import (
    BillingAgent,
    CustomerSupportAgent,
    LedgerResearchAgent,
    PolicyResearchAgent,
    TriageAgent,
)

A = TriageAgent


def no_arguments():
    return 1


def declare(nodes, edges, start="a", finish=None, **extra):
    """Define a Graph class from ``nodes`` (names, all running one Agent) and ``edges``."""
    body = {
        "__module__": __name__,
        "nodes": {name: A for name in nodes},
        "edges": edges,
        "start": start,
        "finish": finish if finish is not None else nodes[-1],
        **extra,
    }
    return type("BrokenGraph", (Graph,), body)


@pytest.mark.parametrize(
    ("nodes", "edges", "options", "message"),
    [
        pytest.param(
            ["a", "b", "orphan", "z"],
            [edge("a", "b"), edge("b", "z"), edge("orphan", "z")],
            {},
            r"node orphan is unreachable from the start node a",
            id="unreachable node",
        ),
        pytest.param(
            ["a", "b", "z"],
            [edge("a", "b"), edge("b", "z")],
            {"start": None},
            r"declares no start node",
            id="missing start",
        ),
        pytest.param(
            ["a", "z"],
            [edge("a", "z")],
            {"start": "nowhere"},
            r"start node nowhere is not declared",
            id="undeclared start",
        ),
        pytest.param(
            ["a", "z"],
            [edge("a", "z"), edge("a", "missing")],
            {},
            r"edge a -> missing names node missing, which is not declared",
            id="edge to an undeclared node",
        ),
        pytest.param(
            ["a", "b", "z"],
            [edge("a", "b"), edge("a", "z")],
            {},
            r"node b has no route onward and is not the finish node",
            id="dead end",
        ),
        pytest.param(
            ["a", "z"],
            [edge("a", "z"), edge("z", "a")],
            {},
            r"edge z -> a leaves the finish node z",
            id="route out of the finish",
        ),
        pytest.param(
            ["a", "z"],
            [edge("a", "z"), edge("a", "z", when=lambda state: True)],
            {},
            r"edge a -> z and edge a -> z both route a to z",
            id="two routes for one pair",
        ),
        pytest.param(
            ["a", "z"],
            [edge("a", "a"), edge("a", "z")],
            {},
            r"edge a -> a leads node a to itself",
            id="self loop",
        ),
        pytest.param(
            ["a", "b", "c", "z"],
            [
                edge("a", "b", when=lambda state: True),
                edge("a", "c"),
                edge("a", "z"),
                edge("b", "z"),
                edge("c", "z"),
            ],
            {},
            r"node a has conditional routes and several unconditional ones \(edge a -> c, edge a -> z\)",
            id="competing routes at a branch boundary",
        ),
        pytest.param(
            ["a", "b", "c", "d", "z"],
            [edge("a", ["b", "c"]), edge("a", "d"), edge("b", "z"), edge("c", "z"), edge("d", "z")],
            {},
            r"node a has competing unconditional routes \(edge a -> \[b, c\], edge a -> d\)",
            id="fan-out beside another unconditional route",
        ),
    ],
)
def test_an_invalid_topology_is_refused_naming_the_culprit(nodes, edges, options, message):
    with pytest.raises(ConfigurationError, match=message):
        declare(nodes, edges, **options)


def test_a_graph_without_a_finish_is_refused():
    with pytest.raises(ConfigurationError, match=r"BrokenGraph declares no finish node"):
        type(
            "BrokenGraph",
            (Graph,),
            {"__module__": __name__, "nodes": {"a": A, "b": A}, "start": "a", "edges": [edge("a", "b")]},
        )


def test_a_parallel_group_without_a_single_join_is_an_ambiguous_join():
    with pytest.raises(ConfigurationError, match=r"the parallel group a -> \[b, c\] has no single join"):
        declare(
            ["a", "b", "c", "x", "y", "z"],
            [
                edge("a", "b"),
                edge("a", "c"),
                edge("b", "x"),
                edge("b", "y"),
                edge("c", "x"),
                edge("c", "y"),
                edge("x", "z"),
                edge("y", "z"),
            ],
        )


def test_parallel_branches_that_never_meet_have_no_join():
    with pytest.raises(ConfigurationError, match=r"no single join \(no node every branch reaches first\)"):
        declare(
            ["a", "b", "x", "c", "z"], [edge("a", "b"), edge("a", "c"), edge("b", "x"), edge("x", "b"), edge("c", "z")]
        )


def test_a_group_starting_inside_a_branch_is_a_nested_group():
    """The inner branches share the outer join: still a group inside a branch, refused as nested."""
    with pytest.raises(
        ConfigurationError, match=r"the parallel group b -> \[b1, b2\] starts inside branch b .*cannot nest"
    ):
        declare(
            ["a", "b", "c", "b1", "b2", "z"],
            [
                edge("a", "b"),
                edge("a", "c"),
                edge("b", "b1"),
                edge("b", "b2"),
                edge("b1", "z"),
                edge("b2", "z"),
                edge("c", "z"),
            ],
        )


def test_nested_groups_with_their_own_inner_join_are_refused_naming_both_groups():
    with pytest.raises(
        ConfigurationError,
        match=r"the parallel group b -> \[b1, b2\] starts inside branch b of the parallel group a -> \[b, c\]; "
        r"parallel groups cannot nest",
    ):
        declare(
            ["a", "b", "c", "b1", "b2", "bj", "z"],
            [
                edge("a", "b"),
                edge("a", "c"),
                edge("b", "b1"),
                edge("b", "b2"),
                edge("b1", "bj"),
                edge("b2", "bj"),
                edge("bj", "z"),
                edge("c", "z"),
            ],
        )


def test_two_groups_sharing_a_branch_node_overlap():
    with pytest.raises(
        ConfigurationError, match=r"node shared in branch c of the parallel group s1 -> \[b, c\] is also entered from d"
    ):
        declare(
            ["a", "s1", "s2", "b", "c", "d", "e", "shared", "j", "z"],
            [
                edge("a", "s1", when=lambda state: True),
                edge("a", "s2"),
                edge("s1", ["b", "c"]),
                edge("s2", ["d", "e"]),
                edge("b", "j"),
                edge("c", "shared"),
                edge("d", "shared"),
                edge("e", "j"),
                edge("shared", "j"),
                edge("j", "z"),
            ],
        )


def test_a_join_entered_from_outside_its_group_is_refused():
    with pytest.raises(
        ConfigurationError, match=r"the join j of the parallel group s -> \[b, c\] is also entered from x"
    ):
        declare(
            ["a", "s", "x", "b", "c", "j"],
            [
                edge("a", "s", when=lambda state: True),
                edge("a", "x"),
                edge("s", ["b", "c"]),
                edge("b", "j"),
                edge("c", "j"),
                edge("x", "j"),
            ],
        )


def test_a_branch_entered_from_outside_its_group_is_refused():
    with pytest.raises(
        ConfigurationError, match=r"node b in branch b of the parallel group s -> \[b, c\] is also entered from a"
    ):
        declare(
            ["a", "s", "b", "c", "j"],
            [
                edge("a", "s", when=lambda state: True),
                edge("a", "b"),
                edge("s", ["b", "c"]),
                edge("b", "j"),
                edge("c", "j"),
            ],
        )


def test_a_branch_reaching_the_finish_before_the_join_is_refused():
    with pytest.raises(ConfigurationError, match=r"branch b reaches the finish node z before the join j"):
        declare(
            ["a", "b", "c", "j", "z"],
            [
                edge("a", ["b", "c"]),
                edge("b", "z", when=lambda state: True),
                edge("b", "j"),
                edge("c", "j"),
                edge("j", "z"),
            ],
        )


def test_a_fan_in_that_does_not_list_every_branch_is_refused():
    with pytest.raises(
        ConfigurationError, match=r"edge \[c, d\] -> j must list the last node of every branch of .*: \[b, c, d\]"
    ):
        declare(["a", "b", "c", "d", "j"], [edge("a", ["b", "c", "d"]), edge("b", "j"), edge(["c", "d"], "j")])


def test_a_fan_in_of_nodes_that_are_no_group_waits_for_nothing_and_is_refused():
    with pytest.raises(ConfigurationError, match=r"edge \[b, c\] -> z waits for nodes that are not the branches"):
        declare(
            ["a", "b", "c", "z"],
            [edge("a", "b", when=lambda state: True), edge("a", "c"), edge(["b", "c"], "z")],
        )


def test_a_fan_in_source_with_another_route_is_refused():
    with pytest.raises(ConfigurationError, match=r"node b is a source of the wait-for-all edge \[b, c\] -> j"):
        declare(
            ["a", "b", "c", "j", "x"],
            [edge("a", ["b", "c"]), edge(["b", "c"], "j"), edge("b", "x", when=lambda s: True), edge("j", "x")],
            finish="x",
        )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: edge(["a", "b"], ["c", "d"]), r"a list source and a list target in one edge"),
        (lambda: edge(["a", "b"], "c", when=lambda s: True), r"a fan-in waits for every branch"),
        (lambda: edge("a", "b", max_concurrency=2), r"max_concurrency applies only to a fan-out edge"),
        (lambda: edge("a", ["b", "c"], max_concurrency=0), r"max_concurrency must be a positive integer or None"),
        (lambda: edge("a", ["b"]), r"lists fewer than two nodes"),
        (lambda: edge("a", ["b", "b"]), r"names a node twice"),
        (lambda: edge("a", "b c"), r"must be a name of letters"),
        (lambda: edge("a", "b", when="yes"), r"edge a -> b: when must be a callable taking the Graph.State"),  # type: ignore[arg-type]
        (lambda: edge("a", "b", input=no_arguments), r"edge a -> b: input must be a callable taking the Graph.State"),  # type: ignore[arg-type]
        (lambda: error_edge("a", "b", on=[]), r"on must be an exception class or a non-empty list"),
        (lambda: error_edge("a", "b", on=[str]), r"on must list exception classes"),
        (lambda: node(TriageAgent, retries=2), r"retries=2 needs retry_on"),
        (lambda: node(TriageAgent, retry_on=[ValueError]), r"retry_on is given but retries is 0"),
        (lambda: node(TriageAgent, timeout=0), r"timeout must be a positive number"),
        (lambda: node(TriageAgent, history="yes"), r"history must be True or False"),  # type: ignore[arg-type]
        (lambda: node("TriageAgent"), r"is not an assembly"),
    ],
)
def test_a_malformed_declaration_fails_where_it_is_written(make, message):
    with pytest.raises(ConfigurationError, match=message):
        make()


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"max_concurrency": 0}, r"BrokenGraph.max_concurrency must be a positive integer"),
        ({"max_steps": True}, r"BrokenGraph.max_steps must be a positive integer"),
        ({"nodes": ["a"]}, r"BrokenGraph.nodes must be a dict"),
        ({"edges": [("a", "z")]}, r"BrokenGraph.edges must hold edge\(...\) and error_edge\(...\) values"),
        (
            {"node": ("a", TriageAgent)},
            r"BrokenGraph declares `node`, which a graph does not read: declare its nodes in `nodes",
        ),
        (
            {"nodes": {"a": TriageAgent, "z": "CustomerSupportAgent"}},
            r"BrokenGraph: node z: 'CustomerSupportAgent' is not an assembly",
        ),
        ({"assembly_id": "Not Valid"}, r"BrokenGraph.assembly_id must be 1-64 lowercase"),
    ],
)
def test_a_bad_class_attribute_fails_when_the_class_is_defined(attributes, message):
    body = {"__module__": __name__, "nodes": {"a": A, "z": A}, "start": "a", "finish": "z", "edges": [edge("a", "z")]}
    with pytest.raises(ConfigurationError, match=message):
        type("BrokenGraph", (Graph,), {**body, **attributes})


def test_an_error_edge_to_an_undeclared_node_and_a_repeated_one_are_refused():
    with pytest.raises(ConfigurationError, match=r"error_edge a -> nowhere names node nowhere"):
        declare(["a", "z"], [edge("a", "z"), error_edge("a", "nowhere", on=ValueError)])
    with pytest.raises(ConfigurationError, match=r"error_edge a -> r is declared twice"):
        declare(
            ["a", "r", "z"],
            [edge("a", "z"), edge("r", "z"), error_edge("a", "r", on=ValueError), error_edge("a", "r", on=KeyError)],
        )


def test_a_node_reached_only_by_an_error_edge_is_reachable():
    graph = declare(["a", "r", "z"], [edge("a", "z"), edge("r", "z"), error_edge("a", "r", on=ValueError)])
    assert graph.validate() is graph


def test_a_builder_reports_the_same_faults_from_validate():
    builder = GraphBuilder(id="support_flow")
    builder.node("triage", TriageAgent).node("billing", BillingAgent).node("respond", CustomerSupportAgent)
    builder.start("triage")
    builder.edge("triage", "respond").edge("billing", "respond")
    with pytest.raises(ConfigurationError, match=r"declares no finish node"):
        builder.validate()
    builder.finish("respond")
    with pytest.raises(ConfigurationError, match=r"GraphBuilder\('support_flow'\): node billing is unreachable"):
        builder.validate()
    builder.edge("triage", "billing", when=lambda state: True)
    assert builder.validate() is builder


def test_a_builder_refuses_a_node_declared_twice_at_once():
    builder = GraphBuilder(id="g").node("a", LedgerResearchAgent)
    with pytest.raises(ConfigurationError, match=r"node a is declared twice"):
        builder.node("a", PolicyResearchAgent)


def test_a_loop_after_the_join_leaves_the_join_as_the_first_common_successor():
    graph = declare(
        ["a", "b", "c", "review", "revise", "z"],
        [
            edge("a", "b"),
            edge("a", "c"),
            edge("b", "review"),
            edge("c", "review"),
            edge("review", "revise", when=lambda state: state.result("review").output == "revise"),
            edge("review", "z"),
            edge("revise", "review"),
        ],
    )
    (group,) = graph.definition().spec.groups
    assert (group.join, group.branches) == ("review", (("b",), ("c",)))


def test_branches_of_several_nodes_join_where_both_chains_meet():
    graph = declare(
        ["a", "b1", "b2", "c1", "j", "z"],
        [edge("a", ["b1", "c1"]), edge("b1", "b2"), edge("b2", "j"), edge("c1", "j"), edge("j", "z")],
    )
    (group,) = graph.definition().spec.groups
    assert (group.join, group.branches) == ("j", (("b1", "b2"), ("c1",)))
    assert group.feeding == ("b2", "c1")  # the order their routes into the join are declared


def test_the_join_lists_its_inputs_in_the_order_their_routes_are_declared():
    graph = declare(
        ["a", "ledger", "policy", "respond"],
        [edge("a", "ledger"), edge("a", "policy"), edge("policy", "respond"), edge("ledger", "respond")],
    )
    (group,) = graph.definition().spec.groups
    assert group.feeding == ("policy", "ledger")
