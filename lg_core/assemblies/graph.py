"""Graph: named assembly nodes and the declared routes between them, as a class or a builder.

    class SupportFlowGraph(Graph):
        nodes = {"triage": TriageAgent, "billing": BillingAgent,
                 "general": CustomerSupportAgent, "respond": CustomerSupportAgent}
        start = "triage"
        edges = [edge("triage", "billing", when=lambda state: state.result("triage").output == "billing"),
                 edge("triage", "general"),
                 edge("billing", "respond"), edge("general", "respond")]
        finish = "respond"

A node holds any assembly (an Agent, Workflow, Swarm or Graph). At most one conditional
route may match from a node, with one unconditional fallback; several unconditional edges
from a node with no condition, or a list target, run branches in parallel up to
``max_concurrency`` (default 8) and join at their first common successor, or at the node a
list-source edge declares. ``error_edge`` routes a node's listed failures to a recovery
node. Conditions and input mappers receive a copied, frozen :class:`Graph.State`. Nodes get
no caller history or context unless ``node(..., history=True, context=True)`` opts in.
The topology is validated when the class is defined (see ``_graph_rules``), and
:meth:`Graph.to_mermaid` draws it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from lg_core.assemblies._graph_frame import graph_start, run_spec
from lg_core.assemblies._graph_node import GraphNodeStep
from lg_core.assemblies._graph_rules import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_STEPS,
    GraphSpec,
    graph_spec,
    validate_graph,
)
from lg_core.assemblies._mermaid import graph_mermaid
from lg_core.assemblies._policy import checked_limit
from lg_core.assemblies.assembly import SWARM_DECLARATIONS, Assembly
from lg_core.assemblies.builder import AssemblyBuilder
from lg_core.assemblies.declarations import Edge, ErrorEdge, Node, StateCallback, checked_name, edge, error_edge, node
from lg_core.assemblies.definition import AssemblyDefinition
from lg_core.assemblies.graph_state import GraphState
from lg_core.assemblies.trajectory import stored_assembly_result
from lg_core.engine.driven_frames import DrivenStart
from lg_core.errors import ConfigurationError
from lg_core.run_result import RunResult


class Graph(Assembly):
    """Routes a request through named assembly nodes along declared edges."""

    assembly_kind: ClassVar[str] = "graph"
    State = GraphState
    _kind_base: ClassVar[bool] = True

    nodes: ClassVar[Mapping[str, Any]] = {}
    start: ClassVar[str | None] = None
    finish: ClassVar[str | None] = None
    edges: ClassVar[Sequence[Any]] = ()
    max_concurrency: ClassVar[int] = DEFAULT_MAX_CONCURRENCY
    max_steps: ClassVar[int] = DEFAULT_MAX_STEPS

    _REFUSED: ClassVar[Mapping[str, str]] = {
        **Assembly._REFUSED,
        **dict.fromkeys(SWARM_DECLARATIONS, "that is a Swarm declaration"),
        "perform": "a Graph routes along its edges; compose calls in Python with a Workflow",
        "node": "declare its nodes in `nodes = {name: Assembly or node(Assembly, ...)}`",
        **dict.fromkeys(
            ("edge", "error_edge", "error_edges"), "declare its routes in `edges = [edge(...), error_edge(...)]`"
        ),
    }

    @classmethod
    def _read_definition(cls) -> AssemblyDefinition | None:
        owner = cls.__qualname__
        if not isinstance(cls.nodes, Mapping):
            raise ConfigurationError(f"{owner}.nodes must be a dict of node name to assembly")
        if isinstance(cls.edges, (str, bytes)) or not isinstance(cls.edges, Sequence):
            raise ConfigurationError(f"{owner}.edges must be a list of edge(...) and error_edge(...) values")
        spec = graph_spec(
            owner,
            nodes=cls.nodes,
            start=cls.start,
            finish=cls.finish,
            edges=cls.edges,
            max_concurrency=cls.max_concurrency,
            max_steps=cls.max_steps,
        )
        if not spec.nodes:
            return None  # an abstract base: its subclasses declare the nodes
        return cls._new_definition(validate_graph(spec, owner))

    @classmethod
    def _incomplete(cls) -> str:
        return f"{cls.__qualname__} declares no nodes; map node names to assemblies in `nodes`"

    @classmethod
    def to_mermaid(cls) -> str:
        """Mermaid flowchart source for the validated topology."""
        return graph_mermaid(cls.definition())

    # -- running (the engine calls these on the run's entrypoint class) ------------------------

    @classmethod
    def driven_start(cls, run: Any) -> DrivenStart:
        """A new run's frame and first node step; the definition is stored with it when it can be."""
        definition, stored = cls.started_definition(run)
        spec = definition.spec
        assert isinstance(spec, GraphSpec)  # a Graph's definition holds a GraphSpec
        return graph_start(spec, definition.assembly_id, run.invocation.message, stored)

    @classmethod
    def step_body(cls, scope: Any) -> GraphNodeStep:
        """The body of one of the run's node steps, under the definition the run started with."""
        stored = scope.frame.checkpoint.data.get("definition")
        return GraphNodeStep(scope, run_spec(scope.run.id, stored, cls, scope.engine.store))

    @classmethod
    def stored_result(cls, stored: Mapping[str, Any]) -> RunResult:
        """The RunResult of a finished run read back from the store, with its trajectory."""
        return stored_assembly_result(stored)

    @classmethod
    def to_builder(cls) -> GraphBuilder:
        """A mutable GraphBuilder seeded with this class's declarations."""
        return GraphBuilder(base=cls)


class GraphBuilder(AssemblyBuilder):
    """Builds a Graph from nodes and routes discovered at runtime."""

    kind = "graph"
    default_base = Graph

    def __init__(self, id: str | None = None, description: str | None = None, runtime: Any = None, base: Any = None):
        self._nodes: dict[str, Node] = {}
        self._start: str | None = None
        self._finish: str | None = None
        self._edges: list[Edge | ErrorEdge] = []
        self._max_concurrency = DEFAULT_MAX_CONCURRENCY
        self._max_steps = DEFAULT_MAX_STEPS
        super().__init__(id=id, description=description, runtime=runtime, base=base)

    def node(self, name: str, assembly: Any, **options: Any) -> GraphBuilder:
        """Declare node ``name`` running ``assembly`` (options as :func:`node`); a name only once."""
        checked_name(name, f"{type(self).__name__}.node name")
        if name in self._nodes:
            raise ConfigurationError(f"{type(self).__name__}: node {name} is declared twice")
        self._nodes[name] = node(assembly, **options).named(name)
        return self

    def edge(
        self,
        source: str | Sequence[str],
        target: str | Sequence[str],
        *,
        when: StateCallback | None = None,
        input: StateCallback | None = None,
        max_concurrency: int | None = None,
    ) -> GraphBuilder:
        """Declare a route, fan-out or fan-in (as :func:`edge`)."""
        self._edges.append(edge(source, target, when=when, input=input, max_concurrency=max_concurrency))
        return self

    def error_edge(self, source: str, target: str, *, on: Any, input: StateCallback | None = None) -> GraphBuilder:
        """Declare a recovery route (as :func:`error_edge`)."""
        self._edges.append(error_edge(source, target, on=on, input=input))
        return self

    def start(self, name: str | None = None) -> str | None:
        """Read or assign the entry node."""
        if name is not None:
            self._start = checked_name(name, f"{type(self).__name__}.start")
        return self._start

    def finish(self, name: str | None = None) -> str | None:
        """Read or assign the terminal node."""
        if name is not None:
            self._finish = checked_name(name, f"{type(self).__name__}.finish")
        return self._finish

    def max_concurrency(self, value: int | None = None) -> int:
        """Read or assign the bound of every parallel group without its own."""
        if value is not None:
            self._max_concurrency = checked_limit(value, f"{type(self).__name__}.max_concurrency")
        return self._max_concurrency

    def max_steps(self, value: int | None = None) -> int:
        """Read or assign the most node executions of one run."""
        if value is not None:
            self._max_steps = checked_limit(value, f"{type(self).__name__}.max_steps")
        return self._max_steps

    def to_mermaid(self) -> str:
        """Mermaid flowchart source for the current, validated declarations."""
        return graph_mermaid(self.definition())

    def _seed(self, definition: AssemblyDefinition) -> None:
        spec = definition.spec
        assert isinstance(spec, GraphSpec)
        self._nodes = {item.name: item for item in spec.nodes}
        self._start, self._finish = spec.start, spec.finish
        self._edges = [*spec.edges, *spec.error_edges]
        self._max_concurrency, self._max_steps = spec.max_concurrency, spec.max_steps

    def _spec(self, owner: str) -> GraphSpec:
        spec = graph_spec(
            owner,
            nodes=list(self._nodes.values()),
            start=self._start,
            finish=self._finish,
            edges=self._edges,
            max_concurrency=self._max_concurrency,
            max_steps=self._max_steps,
        )
        return validate_graph(spec, owner)


__all__ = ["Graph", "GraphBuilder"]
