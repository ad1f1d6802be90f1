"""``Graph.to_mermaid()`` draws the validated routes: conditions and the fallback, parallel
branches and their join, error edges, the start and the finish."""

from __future__ import annotations

import pytest

from lg_core import ConfigurationError, Graph, GraphBuilder
from tests.assemblies import spec_examples as examples


def test_support_flow_shows_the_condition_and_its_fallback():
    assert examples.SupportFlowGraph.to_mermaid() == (
        "flowchart TD\n"
        "    lg_start([start]) --> n0\n"
        '    n0["triage<br/>triage (agent)"]\n'
        '    n1["billing<br/>billing (agent)"]\n'
        '    n2["general<br/>customer_support (agent)"]\n'
        '    n3["respond<br/>customer_support (agent)"]\n'
        "    n0 -->|when| n1\n"
        "    n0 -->|otherwise| n2\n"
        "    n1 --> n3\n"
        "    n2 --> n3\n"
        "    n3 --> lg_finish([finish])\n"
    )


def test_a_parallel_group_shows_its_branches_bound_and_join():
    lines = examples.InvestigationGraph.to_mermaid().splitlines()
    assert "    n0 ==>|parallel, max 8| n1" in lines and "    n0 ==>|parallel, max 8| n2" in lines
    assert "    n1 ==>|join| n3" in lines and "    n2 ==>|join| n3" in lines


def test_input_mappers_and_a_declared_bound_are_labelled():
    lines = examples.DeclaredJoinGraph.to_mermaid().splitlines()
    assert "    n0 ==>|parallel, max 2, input| n1" in lines
    assert "    n1 ==>|join, input| n3" in lines


def test_an_error_edge_is_dotted_with_the_classes_it_takes():
    assert "    n0 -.->|on ProviderError| n1" in examples.RecoveringGraph.to_mermaid().splitlines()


def test_nested_assemblies_show_their_kind_and_node_names_that_are_mermaid_keywords_are_safe():
    graph = (
        GraphBuilder(id="keywords")
        .node("end", examples.InvestigationWorkflow)
        .node("graph", examples.ProblemSolverSwarm)
    )
    graph.start("end")
    graph.edge("end", "graph")
    graph.finish("graph")
    assert graph.to_mermaid() == (
        "flowchart TD\n"
        "    lg_start([start]) --> n0\n"
        '    n0["end<br/>investigation (workflow)"]\n'
        '    n1["graph<br/>problem_solver (swarm)"]\n'
        "    n0 --> n1\n"
        "    n1 --> lg_finish([finish])\n"
    )


def test_an_incomplete_graph_has_no_diagram():
    with pytest.raises(ConfigurationError, match=r"declares no nodes"):
        Graph.to_mermaid()
