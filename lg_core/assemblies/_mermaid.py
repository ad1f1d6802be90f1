"""A Graph definition as Mermaid flowchart source, for reviewing the routes it declares.

    flowchart TD
        lg_start([start]) --> n0
        n0["triage<br/>triage (agent)"]
        n0 -->|when| n1
        n0 -->|otherwise| n2
        n1 ==>|parallel, max 8| n3
        n3 -.->|on ProviderError| n4
        n5 --> lg_finish([finish])

Nodes get positional ids (``n0``, ``n1`` ...) and show their name and assembly, because a
node name may be a Mermaid keyword (``end``) or hold a ``-``. Arrows: ``-->`` a route
(labelled ``when`` for a condition, ``otherwise`` for the fallback beside conditions, with
``input`` added when a mapper feeds the target), ``==>`` a parallel branch or a branch joining,
``-.->`` an error edge with the classes it takes.
"""

from __future__ import annotations

from typing import Any

from lg_core.assemblies._graph_rules import GraphSpec
from lg_core.assemblies._participants import participant_kind


def graph_mermaid(definition: Any) -> str:
    """The flowchart of a validated Graph definition (an AssemblyDefinition of kind ``graph``)."""
    spec: GraphSpec = definition.spec
    ids = {item.name: f"n{index}" for index, item in enumerate(spec.nodes)}
    lines = ["flowchart TD", f"    lg_start([start]) --> {ids[str(spec.start)]}"]
    for declared in spec.nodes:
        lines.append(f'    {ids[declared.name]}["{declared.name}<br/>{_assembly(declared.assembly)}"]')
    grouped = {(group.source, head): group for group in spec.groups for head in group.heads}
    joining = {(name, group.join) for group in spec.groups for branch in group.branches for name in branch}
    for item in spec.edges:
        conditional_beside = any(other.conditional for other in spec.routes_from(item.sources[0]))
        for source in item.sources:
            for target in item.targets:
                group = grouped.get((source, target))
                if group is not None:
                    label, arrow = f"parallel, max {group.max_concurrency}", "==>"
                elif (source, target) in joining:
                    label, arrow = "join", "==>"
                else:
                    label = "when" if item.conditional else ("otherwise" if conditional_beside else "")
                    arrow = "-->"
                if item.input is not None:
                    label = f"{label}, input" if label else "input"
                lines.append(f"    {ids[source]} {arrow}{_label(label)} {ids[target]}")
    for recovery in spec.error_edges:
        classes = " ".join(cls.__name__ for cls in recovery.on)
        lines.append(f"    {ids[recovery.source]} -.->|on {classes}| {ids[recovery.target]}")
    lines.append(f"    {ids[str(spec.finish)]} --> lg_finish([finish])")
    return "\n".join(lines) + "\n"


def _assembly(participant: Any) -> str:
    return f"{participant.assembly_id} ({participant_kind(participant)})"


def _label(text: str) -> str:
    return f"|{text}|" if text else ""


__all__ = ["graph_mermaid"]
