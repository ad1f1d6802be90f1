"""A Swarm's declarations as one checked value: Agent members, the start, the allowed handoffs, the bounds.

The Swarm class and the SwarmBuilder both read their declarations through
:func:`swarm_spec`, so a class and a builder accept and refuse the same things, each
refusal naming the member or route at fault. Members are Agents only, so that every
transition stays a direct model-to-model handoff; a route not declared here is never
offered to a model, and a member no route reaches would never run, so it is refused
rather than ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lg_core.assemblies._participants import participant_label, refuse_non_agent_member
from lg_core.assemblies._policy import checked_limit, checked_optional_limit
from lg_core.assemblies.declarations import Member, member
from lg_core.errors import ConfigurationError

DEFAULT_MAX_STEPS = 32


@dataclass(frozen=True, slots=True)
class SwarmSpec:
    """A Swarm's members, start member, handoff routes (by member name) and bounds."""

    members: tuple[Member, ...]
    start: str | None
    handoffs: Mapping[str, tuple[str, ...]]
    max_steps: int = DEFAULT_MAX_STEPS
    max_handoff_repeats: int | None = None

    def member_named(self, name: str) -> Member:
        return next(item for item in self.members if item.name == name)

    def routes(self) -> list[tuple[str, str]]:
        """Every declared directed handoff, in declaration order."""
        return [(source, target) for source, targets in self.handoffs.items() for target in targets]


def swarm_spec(
    owner: str,
    *,
    members: Iterable[Any],
    start: Any,
    handoffs: Iterable[tuple[Any, Any]],
    max_steps: Any = DEFAULT_MAX_STEPS,
    max_handoff_repeats: Any = None,
) -> SwarmSpec:
    """Read and check a Swarm's declarations; ConfigurationError naming the member or handoff at fault."""
    declared = tuple(_as_member(item, owner) for item in members)
    _refuse_duplicate_names(declared, owner)
    routes: dict[str, list[str]] = {}
    for source, targets in handoffs:
        source_name = _member_name(source, declared, owner, "a handoff from")
        for target in _listed(targets):
            target_name = _member_name(target, declared, owner, f"the handoff from {source_name} to")
            if target_name == source_name:
                raise ConfigurationError(f"{owner}: a handoff from {source_name} to itself is not a handoff")
            listed = routes.setdefault(source_name, [])
            if target_name in listed:
                raise ConfigurationError(f"{owner}: the handoff from {source_name} to {target_name} is declared twice")
            listed.append(target_name)
    return SwarmSpec(
        members=declared,
        start=None if start is None else _member_name(start, declared, owner, "start"),
        handoffs={source: tuple(targets) for source, targets in routes.items()},
        max_steps=checked_limit(max_steps, f"{owner}.max_steps"),
        max_handoff_repeats=checked_optional_limit(max_handoff_repeats, f"{owner}.max_handoff_repeats"),
    )


def validate_swarm(spec: SwarmSpec, owner: str) -> None:
    """The checks a complete Swarm passes: members, a start, and every member reachable from it."""
    if not spec.members:
        raise ConfigurationError(f"{owner} declares no members; list its Agents in `members`")
    if spec.start is None:
        raise ConfigurationError(f"{owner} declares no start member; set `start` to the Agent that answers first")
    reached = {spec.start}
    frontier = [spec.start]
    while frontier:
        for target in spec.handoffs.get(frontier.pop(), ()):
            if target not in reached:
                reached.add(target)
                frontier.append(target)
    unreached = [item.name for item in spec.members if item.name not in reached]
    if unreached:
        raise ConfigurationError(
            f"{owner}: member {', '.join(unreached)} is reached by no handoff from the start member "
            f"{spec.start}, so it would never run; declare a handoff to it or remove it"
        )


def _as_member(declared: Any, owner: str) -> Member:
    """A ``member(...)`` as given, or a bare Agent class as ``member(Agent)``; anything else names itself."""
    refuse_non_agent_member(declared.agent if isinstance(declared, Member) else declared, f"{owner}: ")
    return declared if isinstance(declared, Member) else member(declared)


def _refuse_duplicate_names(members: Sequence[Member], owner: str) -> None:
    seen: set[str] = set()
    for item in members:
        if item.name in seen:
            raise ConfigurationError(
                f"{owner}: two members are named {item.name!r}; give one of them another name with as_="
            )
        seen.add(item.name)


def _member_name(reference: Any, members: Sequence[Member], owner: str, role: str) -> str:
    """The member a start or handoff names, by member name or by Agent class."""
    if isinstance(reference, str):
        if any(item.name == reference for item in members):
            return reference
        shown = reference
    else:
        matching = [item.name for item in members if item.agent is reference]
        if len(matching) == 1:
            return matching[0]
        if len(matching) > 1:
            raise ConfigurationError(
                f"{owner}: {role} {participant_label(reference)} is ambiguous: members {', '.join(matching)} "
                "run that Agent; name the member instead"
            )
        shown = participant_label(reference) if hasattr(reference, "assembly_kind") else repr(reference)
    known = ", ".join(item.name for item in members) or "none"
    raise ConfigurationError(f"{owner}: {role} {shown}, which is not a member (members: {known})")


def _listed(targets: Any) -> Sequence[Any]:
    if isinstance(targets, (list, tuple)):
        return targets
    return (targets,)


def handoff_pairs(declared: Any, owner: str) -> list[tuple[Any, Any]]:
    """A class's ``handoffs`` mapping (``{From: [To, ...]}``) as (from, to) declarations."""
    if not isinstance(declared, Mapping):
        raise ConfigurationError(f"{owner}.handoffs must be a dict like {{TriageAgent: [BillingAgent]}}")
    return list(declared.items())


__all__ = ["DEFAULT_MAX_STEPS", "SwarmSpec", "handoff_pairs", "swarm_spec", "validate_swarm"]
