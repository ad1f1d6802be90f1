"""AssemblyDefinition: the fixed, storable snapshot of one Workflow, Swarm or Graph declaration.

A named class's definition is built (and validated) when the class is defined; a builder
makes a new one from its current declarations for each run, so later builder edits affect
later runs only. ``to_dict`` / ``from_dict`` are its stored form (see ``_definition_codec``
for how code is named): a run stores the definition it started with, and a resumed run
reads that one back, whatever the builder holds by then. Reading it validates it again.

Both are memoised for the definitions a process keeps using: a named class's definition is
encoded once (its code is checked to be importable then), and a stored form equal to the
encoding of its implementation class's own definition reads back as that definition, with no
decoding: decoding it would import the same classes and find the same callables. So a Graph
run does not check and validate its class's declarations again at its start and at its first
node; a run that started with another definition (an earlier version of the class, a
builder's) is decoded in full.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lg_core.assemblies._assembly_runs import build_assembly_run
from lg_core.assemblies._definition_codec import (
    FORMAT,
    class_path,
    decode_callable,
    decode_participant,
    decode_policy,
    encode_callable,
    encode_participant,
    encode_policy,
    load_class,
)
from lg_core.assemblies._graph_rules import GraphSpec, graph_spec, validate_graph
from lg_core.assemblies._swarm_rules import SwarmSpec, swarm_spec, validate_swarm
from lg_core.assemblies.declarations import Edge, ErrorEdge, Member, Node
from lg_core.engine.recent_dict import DEFAULT_RUN_CACHE_SIZE, RecentDict
from lg_core.errors import ConfigurationError, RunStateError

if TYPE_CHECKING:
    from lg_core.run import Run

# Definitions encoded in this process, by id, with the definition itself (so its id is not
# reused while the entry lives) and its stored form as JSON text (each caller gets its own copy).
_ENCODED: RecentDict[int, tuple[AssemblyDefinition, str]] = RecentDict(DEFAULT_RUN_CACHE_SIZE)


@dataclass(frozen=True, slots=True)
class WorkflowSpec:
    """A Workflow's composition: a builder's ``perform`` function, or None for the class's own method."""

    perform: Callable[[Any], Any] | None = None


Spec = WorkflowSpec | SwarmSpec | GraphSpec


@dataclass(frozen=True, slots=True)
class AssemblyDefinition:
    """A complete assembly configuration: its kind, id, description, implementation class and spec."""

    kind: str
    assembly_id: str
    description: str
    implementation: type
    spec: Spec

    @property
    def assembly_kind(self) -> str:
        """The kind, under the name participants are recognised by (a definition is a participant)."""
        return self.kind

    def build_run(self, message: Any = None, /, **options: Any) -> Run:
        """A dormant Run of this definition (its implementation class the entrypoint), as a participant's
        child run or a builder's call is built; ConfigurationError when it cannot be stored with the run."""
        return build_assembly_run(self.implementation, message, options, definition=self)

    def to_dict(self) -> dict[str, Any]:
        """The stored form; ConfigurationError naming a class or callable no other process could import."""
        encoded: dict[str, Any] = json.loads(self._encoded())
        return encoded

    def _encoded(self) -> str:
        """The stored form as JSON text, encoded once per definition (a definition never changes)."""
        known = _ENCODED.get(id(self), None)
        if known is not None and known[0] is self:
            return known[1]
        text = json.dumps(self._encode())
        _ENCODED[id(self)] = (self, text)
        return text

    def _encode(self) -> dict[str, Any]:
        owner = f"{self.kind} {self.assembly_id}"
        return {
            "format": FORMAT,
            "kind": self.kind,
            "assembly_id": self.assembly_id,
            "description": self.description,
            "implementation": class_path(self.implementation, owner),
            self.kind: _encode_spec(self.spec, self.implementation, owner),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AssemblyDefinition:
        """The definition ``to_dict`` stored, validated again; RunStateError when its code cannot be found."""
        if data.get("format") != FORMAT:
            raise RunStateError(
                f"stored assembly definition has format {data.get('format')!r}; this version reads {FORMAT}"
            )
        kind = data["kind"]
        owner = f"{kind} {data['assembly_id']}"
        implementation = load_class(data["implementation"], owner)
        own = _declared_definition(implementation)
        if own is not None and json.loads(own._encoded()) == data:
            return own  # what decoding would rebuild: the same classes, callables and routes
        return cls(
            kind=kind,
            assembly_id=data["assembly_id"],
            description=data.get("description", ""),
            implementation=implementation,
            spec=_decode_spec(kind, data[kind], owner),
        )


def _declared_definition(implementation: type) -> AssemblyDefinition | None:
    """The definition ``implementation`` declares itself, if it can be stored (else None)."""
    declared = getattr(implementation, "declared_definition", None)
    definition = declared() if callable(declared) else None
    if not isinstance(definition, AssemblyDefinition):
        return None
    try:
        definition._encoded()
    except ConfigurationError:  # a lambda no stored form names: no stored form can equal it
        return None
    return definition


def locate(implementation: type, place: Mapping[str, Any]) -> Any:
    """The callable ``implementation``'s own definition declares at ``place``, or None."""
    declared = getattr(implementation, "declared_definition", None)
    definition = declared() if callable(declared) else None
    if definition is None:
        return None
    spec = definition.spec
    if "perform" in place:
        return spec.perform if isinstance(spec, WorkflowSpec) else None
    if not isinstance(spec, GraphSpec):
        return None
    if "node" in place:
        found: Any = next((item for item in spec.nodes if f"node {item.name}" == place["node"]), None)
    else:
        routes: list[Edge | ErrorEdge] = [*spec.edges, *spec.error_edges]
        found = next((item for item in routes if item.label == place.get("edge")), None)
    return None if found is None else getattr(found, place["part"], None)


def _encode_spec(spec: Spec, implementation: type, owner: str) -> dict[str, Any]:
    def code(callback: Any, **place: Any) -> Any:
        return encode_callable(callback, place, implementation, locate)

    if isinstance(spec, WorkflowSpec):
        return {"perform": code(spec.perform, perform="perform")}
    if isinstance(spec, SwarmSpec):
        return {
            "members": [_encode_member(item, owner) for item in spec.members],
            "start": spec.start,
            "handoffs": {source: list(targets) for source, targets in spec.handoffs.items()},
            "max_steps": spec.max_steps,
            "max_handoff_repeats": spec.max_handoff_repeats,
        }
    return {
        "nodes": [
            {
                "name": item.name,
                "assembly": encode_participant(item.assembly, f"{owner}: node {item.name}"),
                "policy": encode_policy(item.policy, f"{owner}: node {item.name}"),
                "history": item.history,
                "context": item.context,
                "input": code(item.input, node=f"node {item.name}", part="input"),
            }
            for item in spec.nodes
        ],
        "start": spec.start,
        "finish": spec.finish,
        "edges": [
            {
                "source": _endpoint(item.source),
                "target": _endpoint(item.target),
                "when": code(item.when, edge=item.label, part="when"),
                "input": code(item.input, edge=item.label, part="input"),
                "max_concurrency": item.max_concurrency,
            }
            for item in spec.edges
        ],
        "error_edges": [
            {
                "source": item.source,
                "target": item.target,
                "on": [class_path(cls, f"{owner}: {item.label}") for cls in item.on],
                "input": code(item.input, edge=item.label, part="input"),
            }
            for item in spec.error_edges
        ],
        "max_concurrency": spec.max_concurrency,
        "max_steps": spec.max_steps,
    }


def _encode_member(item: Member, owner: str) -> dict[str, Any]:
    where = f"{owner}: member {item.name}"
    return {
        "agent": encode_participant(item.agent, where),
        "as": item.as_,
        "policy": encode_policy(item.policy, where),
        "history": item.history,
        "context": item.context,
    }


def _decode_spec(kind: str, stored: Mapping[str, Any], owner: str) -> Spec:
    if kind == "workflow":
        return WorkflowSpec(perform=decode_callable(stored.get("perform"), locate))
    if kind == "swarm":
        spec = swarm_spec(
            owner,
            members=[_decode_member(item, owner) for item in stored["members"]],
            start=stored.get("start"),
            handoffs=list(stored.get("handoffs", {}).items()),
            max_steps=stored["max_steps"],
            max_handoff_repeats=stored.get("max_handoff_repeats"),
        )
        validate_swarm(spec, owner)
        return spec
    if kind != "graph":
        raise RunStateError(f"{owner}: stored assembly kind {kind!r} is not a workflow, swarm or graph")
    nodes = [
        Node(
            item["name"],
            decode_participant(item["assembly"], owner, AssemblyDefinition.from_dict),
            decode_policy(item.get("policy", {}), f"{owner}: node {item['name']}"),
            item.get("history", False),
            item.get("context", False),
            decode_callable(item.get("input"), locate),
        )
        for item in stored["nodes"]
    ]
    edges: list[Edge | ErrorEdge] = [
        Edge(
            _stored_endpoint(item["source"]),
            _stored_endpoint(item["target"]),
            when=decode_callable(item.get("when"), locate),
            input=decode_callable(item.get("input"), locate),
            max_concurrency=item.get("max_concurrency"),
        )
        for item in stored.get("edges", ())
    ]
    edges += [
        ErrorEdge(
            item["source"],
            item["target"],
            on=tuple(load_class(path, owner) for path in item["on"]),
            input=decode_callable(item.get("input"), locate),
        )
        for item in stored.get("error_edges", ())
    ]
    spec_read = graph_spec(
        owner,
        nodes=nodes,
        start=stored.get("start"),
        finish=stored.get("finish"),
        edges=edges,
        max_concurrency=stored["max_concurrency"],
        max_steps=stored["max_steps"],
    )
    return validate_graph(spec_read, owner)


def _decode_member(stored: Mapping[str, Any], owner: str) -> Member:
    where = f"{owner}: member {stored.get('as') or stored['agent']}"
    return Member(
        agent=decode_participant(stored["agent"], where, AssemblyDefinition.from_dict),
        as_=stored.get("as"),
        policy=decode_policy(stored.get("policy", {}), where),
        history=stored.get("history", False),
        context=stored.get("context", False),
    )


def _endpoint(endpoint: str | tuple[str, ...]) -> str | list[str]:
    return endpoint if isinstance(endpoint, str) else list(endpoint)


def _stored_endpoint(stored: str | list[str]) -> str | tuple[str, ...]:
    return stored if isinstance(stored, str) else tuple(stored)


__all__ = ["AssemblyDefinition", "Spec", "WorkflowSpec", "locate"]
