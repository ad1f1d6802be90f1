"""A Graph's parallel groups: which branches run at once, where they join, and the shapes refused.

A group starts at a source node, either by a fan-out edge (``edge("triage", ["ledger",
"policy"])``) or by several unconditional edges from a node with no conditional one. Its join
is the branches' first common successor: the one node every branch reaches without passing
through another node that every branch reaches. Each branch is what its head reaches before the join. The run waits
for every branch at the join, so the shapes in which "every branch" is not one well-defined
set are refused, naming the nodes: no single first common successor (an ambiguous join), a
node in two branches (overlapping), a group starting inside a branch (nested), a branch, or a
join, entered from outside its group (a loop after the join may re-enter it: the group is done
by then), a branch leading back to its source or on to the finish,
and a wait-for-all fan-in edge that lists other nodes than the branches' last ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lg_core.errors import ConfigurationError

if TYPE_CHECKING:
    from lg_core.assemblies._graph_rules import GraphSpec
    from lg_core.assemblies.declarations import Edge


@dataclass(frozen=True, slots=True)
class ParallelGroup:
    """One fan-out: its source, branch heads, each branch's nodes, its join and concurrency bound.

    ``feeding`` lists the branch nodes with a route into the join, in the order those routes are
    declared: the order in which the join's default input lists their results. ``fan_out`` is the
    declaring edge (None for an inferred group); ``fan_in`` the wait-for-all edge into the join,
    when one is declared (its input mapper feeds the join).
    """

    source: str
    heads: tuple[str, ...]
    branches: tuple[tuple[str, ...], ...]
    join: str
    max_concurrency: int
    feeding: tuple[str, ...] = ()
    fan_out: Edge | None = None
    fan_in: Edge | None = None

    @property
    def label(self) -> str:
        return f"the parallel group {self.source} -> [{', '.join(self.heads)}]"

    def branch_of(self, name: str) -> str | None:
        """The head of the branch ``name`` belongs to, or None outside the group."""
        return next((self.heads[i] for i, nodes in enumerate(self.branches) if name in nodes), None)


def check_groups(
    spec: GraphSpec,
    following: Mapping[str, Sequence[str]],
    inferred: Sequence[tuple[str, tuple[str, ...]]],
    owner: str,
) -> tuple[ParallelGroup, ...]:
    """Every group of ``spec``, declared and inferred, with its join decided and its shape checked."""
    preceding: dict[str, set[str]] = {name: set() for name in following}
    for source, targets in following.items():
        for target in targets:
            preceding[target].add(source)
    starts: list[tuple[str, tuple[str, ...], Edge | None]] = [
        (item.sources[0], item.targets, item) for item in spec.edges if item.fan_out
    ]
    starts += [(source, heads, None) for source, heads in inferred]
    groups = []
    for source, heads, fan_out in starts:
        join = _join(source, heads, following, owner)
        branches = tuple(_branch(head, join, following) for head in heads)
        bound = (fan_out.max_concurrency if fan_out is not None else None) or spec.max_concurrency
        group = ParallelGroup(source, tuple(heads), branches, join, bound, _feeding(branches, join, spec), fan_out)
        _check_branches(group, spec, preceding, owner)
        groups.append(group)
    _check_between_groups(groups, following, preceding, owner)
    _refuse_stray_fan_ins(spec, groups, owner)
    return tuple(_with_fan_in(group, spec, owner) for group in groups)


def _reach(start: str, following: Mapping[str, Sequence[str]], avoid: frozenset[str] = frozenset()) -> set[str]:
    """``start`` and every node it leads to without entering a node of ``avoid``."""
    reached = {start}
    frontier = [start]
    while frontier:
        for target in following[frontier.pop()]:
            if target not in reached and target not in avoid:
                reached.add(target)
                frontier.append(target)
    return reached


def _join(source: str, heads: Sequence[str], following: Mapping[str, Sequence[str]], owner: str) -> str:
    """The branches' first common successor; ConfigurationError when there is not exactly one."""
    shown = f"the parallel group {source} -> [{', '.join(heads)}]"
    reached = [_reach(head, following) for head in heads]
    common = set.intersection(*reached)
    for head in heads:
        if head in common:
            raise ConfigurationError(
                f"{owner}: in {shown}, branch {head} is reached from the other branches; "
                "parallel branches cannot lead into one another"
            )
    # First: every branch reaches it without passing another common node (a loop after the join,
    # such as review -> revise -> review, leaves the join first).
    first = sorted(
        name for name in common if all(name in _reach(head, following, frozenset(common - {name})) for head in heads)
    )
    if len(first) != 1:
        found = f"candidates {', '.join(first)}" if first else "no node every branch reaches first"
        raise ConfigurationError(
            f"{owner}: {shown} has no single join ({found}); route every branch to one common node, "
            "or declare the join with edge([...], node)"
        )
    return first[0]


def _branch(head: str, join: str, following: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    return tuple(sorted(_reach(head, following, frozenset({join}))))


def _check_branches(group: ParallelGroup, spec: GraphSpec, preceding: Mapping[str, set[str]], owner: str) -> None:
    seen: dict[str, str] = {}
    for head, nodes in zip(group.heads, group.branches, strict=True):
        for name in nodes:
            if name == group.source:
                raise ConfigurationError(f"{owner}: in {group.label}, branch {head} leads back to {group.source}")
            if name == spec.finish:
                raise ConfigurationError(
                    f"{owner}: in {group.label}, branch {head} reaches the finish node {name} before the join "
                    f"{group.join}; a branch must end at the join"
                )
            if name in seen:
                raise ConfigurationError(
                    f"{owner}: in {group.label}, node {name} is in branch {seen[name]} and in branch {head}; "
                    "parallel branches cannot overlap"
                )
            seen[name] = head
            allowed = set(nodes) | ({group.source} if name == head else set())
            outside = sorted(preceding[name] - allowed)
            if outside:
                raise ConfigurationError(
                    f"{owner}: node {name} in branch {head} of {group.label} is also entered from "
                    f"{', '.join(outside)} outside that branch"
                )


def _check_between_groups(
    groups: Sequence[ParallelGroup],
    following: Mapping[str, Sequence[str]],
    preceding: Mapping[str, set[str]],
    owner: str,
) -> None:
    """No group starts inside another's branch, no node is in two groups, a join is entered by its branches."""
    for group in groups:
        for other in groups:
            if other is group:
                continue
            inner = group.branch_of(other.source)
            if inner is not None:
                raise ConfigurationError(
                    f"{owner}: {other.label} starts inside branch {inner} of {group.label}; parallel groups cannot nest"
                )
            shared = sorted({n for b in group.branches for n in b} & {n for b in other.branches for n in b})
            if shared:
                raise ConfigurationError(
                    f"{owner}: node {', '.join(shared)} belongs to {group.label} and {other.label}; "
                    "parallel groups cannot overlap"
                )
        siblings = [other for other in groups if other.join == group.join and other.source == group.source]
        inside = {name for other in siblings for branch in other.branches for name in branch}
        downstream = _reach(group.join, following) - {group.join}  # a loop after the join re-enters it later
        outside = sorted(preceding[group.join] - inside - downstream)
        if outside:
            raise ConfigurationError(
                f"{owner}: the join {group.join} of {group.label} is also entered from {', '.join(outside)} "
                "outside the group, so waiting for every branch is not decidable there"
            )


def _with_fan_in(group: ParallelGroup, spec: GraphSpec, owner: str) -> ParallelGroup:
    """``group`` with the wait-for-all edge into its join, checked to list every branch's last nodes."""
    declared = [item for item in spec.edges if item.fan_in and item.target == group.join]
    if not declared:
        return group
    last = sorted(group.feeding)
    fan_in = next((item for item in declared if set(item.sources) & set(last)), declared[0])
    if sorted(fan_in.sources) != last:
        raise ConfigurationError(
            f"{owner}: {fan_in.label} must list the last node of every branch of {group.label}: [{', '.join(last)}]"
        )
    return dataclasses.replace(group, fan_in=fan_in)


def _feeding(branches: tuple[tuple[str, ...], ...], join: str, spec: GraphSpec) -> tuple[str, ...]:
    inside = {name for branch in branches for name in branch}
    ordered: list[str] = []
    for item in spec.edges:
        if join in item.targets:
            ordered += [name for name in item.sources if name in inside and name not in ordered]
    return tuple(ordered)


def _refuse_stray_fan_ins(spec: GraphSpec, groups: Sequence[ParallelGroup], owner: str) -> None:
    """A wait-for-all edge whose sources are not the branches of one group would wait for ever."""
    joins = {group.join for group in groups}
    for item in spec.edges:
        if item.fan_in and item.target not in joins:
            raise ConfigurationError(
                f"{owner}: {item.label} waits for nodes that are not the branches of one parallel group; "
                "fan out to them with edge(source, [..]) or several unconditional edges first"
            )


__all__ = ["ParallelGroup", "check_groups"]
