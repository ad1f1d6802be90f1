"""Where a Graph goes after a node completes: the next node(s), or the end of the run.

This is the decision a running Graph commits together with the completed node's result, so
it is a pure function of the validated spec, the node that completed and the frozen
Graph.State: deciding again after a lost commit race gives the same answer. The rules:

* the finish node ends the Graph, whatever routes leave it;
* of the conditional routes leaving the node, exactly one may match: two matching is an
  ``AssemblyRoutingError`` naming both, since the declaration does not say which wins;
* when none matches, the unconditional routes are taken (one fallback, or the branches of
  an inferred parallel fan-out); with none either, ``AssemblyRoutingError`` again;
* a fan-in route's target is a join: the route says so, and whoever schedules it waits for
  every source of the join before starting it.
"""

from __future__ import annotations

from dataclasses import dataclass

from lg_core.assemblies._graph_rules import GraphSpec
from lg_core.assemblies.declarations import Edge
from lg_core.assemblies.graph_state import GraphState
from lg_core.errors import AssemblyRoutingError


@dataclass(frozen=True, slots=True)
class Route:
    """The decision after a node: the routes taken and the nodes they lead to, or ``finish``."""

    edges: tuple[Edge, ...] = ()
    finish: bool = False

    @property
    def targets(self) -> tuple[str, ...]:
        """The next nodes, in declaration order, each once."""
        return tuple(dict.fromkeys(target for edge in self.edges for target in edge.targets))

    @property
    def joins(self) -> tuple[Edge, ...]:
        """The fan-in routes taken: their target starts only once every source has completed."""
        return tuple(edge for edge in self.edges if edge.fan_in)


FINISH = Route(finish=True)


def route_after(spec: GraphSpec, completed: str, state: GraphState) -> Route:
    """The route the Graph takes after ``completed`` finished, read from ``state``.

    ``state.current`` should name ``completed``: conditions read the state of leaving it.
    A condition's own exception propagates unchanged; the node that completed is not at fault.
    """
    if completed == spec.finish:
        return FINISH
    routes = spec.routes_from(completed)
    matching = tuple(edge for edge in routes if edge.when is not None and edge.when(state))
    if len(matching) > 1:
        listed = ", ".join(edge.label for edge in matching)
        raise AssemblyRoutingError(
            f"node {completed}: more than one conditional route matched ({listed}); "
            "make the conditions exclusive so one route is taken"
        )
    if matching:
        return Route(edges=matching)
    fallback = tuple(edge for edge in routes if edge.when is None)
    if not fallback:
        raise AssemblyRoutingError(
            f"node {completed}: no conditional route matched and none is unconditional; "
            "add an unconditional fallback edge from it"
        )
    return Route(edges=fallback)


__all__ = ["FINISH", "Route", "route_after"]
