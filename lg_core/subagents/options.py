"""What an Agent class declares about its managed subagents, checked, and resolved per run.

    class SupportAgent(Agent):
        subagents = [subagent(ResearchAgent, kind="research"), extra_definitions]
        subagent_long_poll_duration = 10.0
        subagent_limits = {"max_concurrent": 2}

``subagents`` lists ``subagent(...)`` declarations and at most one resolver: a
callable given the run's Invocation that returns further ``Definition`` objects
for that run (the spec's ``subagents(...) { |...| }`` block). The limits and the
long-poll duration are checked when the class is defined; the resolver's
definitions when a run first needs them, a bad one failing that step. A
declaration's ``model=`` and ``tools=`` overrides are applied here, by a subclass
of its agent class kept on the declaring class (lg_core.assemblies.agent_overrides);
a resolver's Definitions take none, as the spec's Definition has none: their
factory returns the class to run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lg_core.errors import ConfigurationError
from lg_core.subagents.declarations import SubagentDeclaration, check_long_poll_duration
from lg_core.subagents.definition import Definition
from lg_core.subagents.limits import DEFAULT_WAIT_TIMEOUT, ManagerLimits


@dataclass(frozen=True, slots=True)
class SubagentOptions:
    """One Agent class's subagents: static declarations, an optional per-run resolver, bounds, long poll."""

    declarations: tuple[SubagentDeclaration, ...]
    resolver: Callable[..., Any] | None
    limits: ManagerLimits
    long_poll_duration: float

    def definitions(self, invocation: Any) -> dict[str, Definition]:
        """The kinds a run's model may spawn, by kind: the declared ones, then the resolver's for ``invocation``."""
        found = {d.kind: d.definition() for d in self.declarations}
        if self.resolver is None:
            return found
        resolved = self.resolver(invocation)
        for definition in resolved or ():
            if not isinstance(definition, Definition):
                raise ConfigurationError(
                    f"a subagents resolver must return Definition objects, got {type(definition).__name__}"
                )
            if definition.kind in found:
                raise ConfigurationError(f"subagent kind {definition.kind!r} is declared twice")
            found[definition.kind] = definition
        return found


def subagent_options(
    owner_class: type, declared: Any, long_poll: Any, limits: Mapping[str, Any] | None
) -> SubagentOptions | None:
    """The checked subagent declarations of the class ``owner_class``, overrides applied; None when it declares none."""
    owner = owner_class.__qualname__
    if declared is None or (isinstance(declared, Sequence) and not isinstance(declared, str) and not declared):
        return None
    if isinstance(declared, (str, bytes)) or not isinstance(declared, Sequence):
        raise ConfigurationError(f"{owner}.subagents must be a list of subagent(...) declarations")
    declarations: list[SubagentDeclaration] = []
    resolvers: list[Callable[..., Any]] = []
    for item in declared:
        if isinstance(item, SubagentDeclaration):
            declarations.append(item)
        elif callable(item) and not isinstance(item, type):
            resolvers.append(item)
        else:
            shown = item.__qualname__ if isinstance(item, type) else repr(item)[:60]
            raise ConfigurationError(
                f"{owner}.subagents: {shown} is neither a subagent(...) declaration nor a resolver function; "
                "wrap an Agent class as subagent(ResearchAgent, kind=...)"
            )
    if len(resolvers) > 1:
        raise ConfigurationError(f"{owner}.subagents has {len(resolvers)} resolvers; declare at most one")
    kinds = [d.kind for d in declarations]
    duplicate = next((kind for kind in kinds if kinds.count(kind) > 1), None)
    if duplicate is not None:
        raise ConfigurationError(f"{owner}.subagents declares the kind {duplicate!r} twice")
    return SubagentOptions(
        tuple(declaration.for_owner(owner_class) for declaration in declarations),
        resolvers[0] if resolvers else None,
        ManagerLimits.from_mapping(limits or {}),
        check_long_poll_duration(DEFAULT_WAIT_TIMEOUT if long_poll is None else long_poll, owner),
    )


__all__ = ["SubagentOptions", "subagent_options"]
