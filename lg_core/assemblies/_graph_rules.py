"""A Graph's declarations as one checked value, and the topology checks a complete Graph passes.

The Graph class and the GraphBuilder both read their declarations through
:func:`graph_spec` and check them with :func:`validate_graph`, so each refuses the same
topologies with the same message, naming the node or edge at fault: an undeclared or
unreachable node, a missing start or finish, a node with no route onward, a route out of
the finish, two routes for one pair of nodes, competing routes where a node's unconditional
edges would start a parallel group, and (in ``_parallel_groups``) joins and groups that
cannot be decided.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lg_core.assemblies._parallel_groups import ParallelGroup, check_groups
from lg_core.assemblies._participants import checked_participant
from lg_core.assemblies._policy import checked_limit
from lg_core.assemblies.declarations import Edge, ErrorEdge, Node, NodeDeclaration, checked_name
from lg_core.errors import ConfigurationError

DEFAULT_MAX_CONCURRENCY = 8
DEFAULT_MAX_STEPS = 32


@dataclass(frozen=True, slots=True)
class GraphSpec:
    """A Graph's nodes, start, finish, routes and bounds; ``groups`` once the topology is validated."""

    nodes: tuple[Node, ...]
    start: str | None
    finish: str | None
    edges: tuple[Edge, ...]
    error_edges: tuple[ErrorEdge, ...] = ()
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    max_steps: int = DEFAULT_MAX_STEPS
    groups: tuple[ParallelGroup, ...] = ()

    def node_named(self, name: str) -> Node:
        return next(item for item in self.nodes if item.name == name)

    def routes_from(self, name: str) -> list[Edge]:
        """The ordinary edges leaving ``name`` (a fan-in edge leaves each of its sources)."""
        return [item for item in self.edges if name in item.sources]


def graph_spec(
    owner: str,
    *,
    nodes: Mapping[str, Any] | Iterable[Node],
    start: Any,
    finish: Any,
    edges: Iterable[Any],
    max_concurrency: Any = DEFAULT_MAX_CONCURRENCY,
    max_steps: Any = DEFAULT_MAX_STEPS,
) -> GraphSpec:
    """Read a Graph's declarations; ConfigurationError naming the node or edge of the wrong kind."""
    ordinary: list[Edge] = []
    recovery: list[ErrorEdge] = []
    for item in edges:
        if isinstance(item, ErrorEdge):
            recovery.append(item)
        elif isinstance(item, Edge):
            ordinary.append(item)
        else:
            raise ConfigurationError(f"{owner}.edges must hold edge(...) and error_edge(...) values, got {item!r}")
    return GraphSpec(
        nodes=_nodes(nodes, owner),
        start=None if start is None else checked_name(start, f"{owner}.start"),
        finish=None if finish is None else checked_name(finish, f"{owner}.finish"),
        edges=tuple(ordinary),
        error_edges=tuple(recovery),
        max_concurrency=checked_limit(max_concurrency, f"{owner}.max_concurrency"),
        max_steps=checked_limit(max_steps, f"{owner}.max_steps"),
    )


def validate_graph(spec: GraphSpec, owner: str) -> GraphSpec:
    """``spec`` with its parallel groups decided; ConfigurationError naming the node or edge at fault."""
    names = [item.name for item in spec.nodes]
    if not names:
        raise ConfigurationError(f"{owner} declares no nodes; map node names to assemblies in `nodes`")
    if spec.start is None:
        raise ConfigurationError(f"{owner} declares no start node; set `start` to the node that runs first")
    if spec.finish is None:
        raise ConfigurationError(f"{owner} declares no finish node; set `finish` to the node whose answer ends it")
    _check_declared(spec, owner)
    _check_pairs(spec, owner)
    inferred = _check_routes(spec, owner)
    _check_reachable(spec, owner)
    groups = check_groups(spec, successors(spec), inferred, owner)
    return dataclasses.replace(spec, groups=groups)


def successors(spec: GraphSpec) -> dict[str, list[str]]:
    """Every node's possible next nodes, over ordinary and error edges, in declaration order."""
    following: dict[str, list[str]] = {item.name: [] for item in spec.nodes}
    pairs = [(source, target) for item in spec.edges for source in item.sources for target in item.targets]
    pairs += [(item.source, item.target) for item in spec.error_edges]
    for source, target in pairs:
        if target not in following.setdefault(source, []):
            following[source].append(target)
    return following


def _nodes(declared: Mapping[str, Any] | Iterable[Node], owner: str) -> tuple[Node, ...]:
    if not isinstance(declared, Mapping):
        return tuple(declared)
    found = []
    for name, value in declared.items():
        checked_name(name, f"{owner}.nodes key")
        if isinstance(value, NodeDeclaration):
            found.append(value.named(name))
        else:
            found.append(Node(name, checked_participant(value, f"{owner}: node {name}")))
    return tuple(found)


def _check_declared(spec: GraphSpec, owner: str) -> None:
    names = [item.name for item in spec.nodes]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise ConfigurationError(f"{owner}: node {twice} is declared twice")
    declared = set(names)
    for role, name in (("start", spec.start), ("finish", spec.finish)):
        if name not in declared:
            raise ConfigurationError(f"{owner}: {role} node {name} is not declared in `nodes`")
    routes: list[Edge | ErrorEdge] = [*spec.edges, *spec.error_edges]
    for item in routes:
        for name in _endpoints(item):
            if name not in declared:
                raise ConfigurationError(f"{owner}: {item.label} names node {name}, which is not declared in `nodes`")


def _endpoints(item: Edge | ErrorEdge) -> tuple[str, ...]:
    if isinstance(item, ErrorEdge):
        return (item.source, item.target)
    return (*item.sources, *item.targets)


def _check_pairs(spec: GraphSpec, owner: str) -> None:
    """One ordinary route per pair of nodes, none out of the finish, none from a node to itself."""
    seen: dict[tuple[str, str], Edge] = {}
    for item in spec.edges:
        for source in item.sources:
            if source == spec.finish:
                raise ConfigurationError(
                    f"{owner}: {item.label} leaves the finish node {source}, where the graph ends; remove it"
                )
            for target in item.targets:
                if target == source:
                    raise ConfigurationError(f"{owner}: {item.label} leads node {source} to itself")
                earlier = seen.setdefault((source, target), item)
                if earlier is not item:
                    raise ConfigurationError(
                        f"{owner}: {earlier.label} and {item.label} both route {source} to {target}; keep one"
                    )
    recovery: set[tuple[str, str]] = set()
    for error_route in spec.error_edges:
        pair = (error_route.source, error_route.target)
        if pair in recovery:
            raise ConfigurationError(f"{owner}: {error_route.label} is declared twice; list every class in one `on`")
        recovery.add(pair)


def _check_routes(spec: GraphSpec, owner: str) -> list[tuple[str, tuple[str, ...]]]:
    """Each node's outgoing routes are decidable; returns the inferred fan-outs (source, branch heads)."""
    inferred: list[tuple[str, tuple[str, ...]]] = []
    for current in spec.nodes:
        name = current.name
        routes = spec.routes_from(name)
        if not routes and name != spec.finish:
            raise ConfigurationError(
                f"{owner}: node {name} has no route onward and is not the finish node; add an edge from it"
            )
        fan_ins = [item for item in routes if item.fan_in]
        if fan_ins and len(routes) > 1:
            others = ", ".join(item.label for item in routes if item is not fan_ins[0])
            raise ConfigurationError(
                f"{owner}: node {name} is a source of the wait-for-all {fan_ins[0].label} and also routes by "
                f"{others}; a branch that joins has one way on"
            )
        unconditional = [item for item in routes if not item.conditional]
        conditional = len(routes) - len(unconditional)
        if len(unconditional) < 2:
            continue
        listed = ", ".join(item.label for item in unconditional)
        if conditional:
            raise ConfigurationError(
                f"{owner}: node {name} has conditional routes and several unconditional ones ({listed}); "
                "keep one unconditional fallback, or declare the parallel branches with edge(source, [..])"
            )
        if any(item.fan_out for item in unconditional):
            raise ConfigurationError(
                f"{owner}: node {name} has competing unconditional routes ({listed}); "
                "put every parallel branch in the one fan-out edge"
            )
        inferred.append((name, tuple(target for item in unconditional for target in item.targets)))
    return inferred


def _check_reachable(spec: GraphSpec, owner: str) -> None:
    following = successors(spec)
    assert spec.start is not None
    reached = {spec.start}
    frontier = [spec.start]
    while frontier:
        for target in following[frontier.pop()]:
            if target not in reached:
                reached.add(target)
                frontier.append(target)
    unreached = [item.name for item in spec.nodes if item.name not in reached]
    if unreached:
        raise ConfigurationError(
            f"{owner}: node {', '.join(unreached)} is unreachable from the start node {spec.start}; "
            "add an edge to it or remove it"
        )


__all__ = ["DEFAULT_MAX_CONCURRENCY", "DEFAULT_MAX_STEPS", "GraphSpec", "graph_spec", "successors", "validate_graph"]
