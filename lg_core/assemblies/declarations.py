"""The values a Swarm or Graph declaration is made of: ``member``, ``node``, ``edge`` and ``error_edge``.

    class ProblemSolverSwarm(Swarm):
        members = [TriageAgent, member(AccountAgent, history=True, context=True)]

    class SupportFlowGraph(Graph):
        nodes = {"triage": TriageAgent, "lookup": node(AccountLookupAgent, context=True)}
        edges = [edge("triage", "lookup", when=lambda state: ...), error_edge("lookup", "triage", on=ProviderError)]

Each helper checks what it is given on the spot (policies, flags, callables, edge shapes), so
a wrong argument fails on the line that wrote it; how the values fit together (members,
routes, parallel groups) is checked when the Swarm or Graph is defined.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lg_core.assemblies._participants import checked_participant, refuse_non_agent_member
from lg_core.assemblies._policy import (
    DEFAULT_POLICY,
    StepPolicy,
    checked_flag,
    checked_optional_limit,
    checked_policy,
    exception_classes,
)
from lg_core.errors import ConfigurationError
from lg_core.tool_declarations import takes_arguments

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")

StateCallback = Callable[[Any], Any]  # a condition or input mapper, called with a Graph.State


@dataclass(frozen=True, slots=True)
class Member:
    """One Agent of a Swarm: its participant name (``as_``, else the agent's id), policy and opt-ins."""

    agent: Any
    as_: str | None = None
    policy: StepPolicy = DEFAULT_POLICY
    history: bool = False
    context: bool = False

    @property
    def name(self) -> str:
        return self.as_ or str(self.agent.assembly_id)


@dataclass(frozen=True, slots=True)
class Node:
    """One Graph node: its name, the assembly it runs, its policy, opt-ins and input mapper."""

    name: str
    assembly: Any
    policy: StepPolicy = DEFAULT_POLICY
    history: bool = False
    context: bool = False
    input: StateCallback | None = None


@dataclass(frozen=True, slots=True)
class NodeDeclaration:
    """What ``node(...)`` returns: a Node still without its name, which is its key in ``nodes``."""

    assembly: Any
    policy: StepPolicy
    history: bool
    context: bool
    input: StateCallback | None

    def named(self, name: str) -> Node:
        return Node(name, self.assembly, self.policy, self.history, self.context, self.input)


@dataclass(frozen=True, slots=True)
class Edge:
    """A route: scalar to scalar, a fan-out (scalar to a tuple) or a fan-in (a tuple to a scalar)."""

    source: str | tuple[str, ...]
    target: str | tuple[str, ...]
    when: StateCallback | None = None
    input: StateCallback | None = None
    max_concurrency: int | None = None

    @property
    def conditional(self) -> bool:
        return self.when is not None

    @property
    def fan_out(self) -> bool:
        return isinstance(self.target, tuple)

    @property
    def fan_in(self) -> bool:
        return isinstance(self.source, tuple)

    @property
    def sources(self) -> tuple[str, ...]:
        return self.source if isinstance(self.source, tuple) else (self.source,)

    @property
    def targets(self) -> tuple[str, ...]:
        return self.target if isinstance(self.target, tuple) else (self.target,)

    @property
    def label(self) -> str:
        """``edge triage -> billing``, ``edge triage -> [ledger, policy]``: how messages name it."""
        return f"edge {_endpoint(self.source)} -> {_endpoint(self.target)}"


@dataclass(frozen=True, slots=True)
class ErrorEdge:
    """A recovery route: a failure of ``source`` (after its retries) of one of ``on`` goes to ``target``."""

    source: str
    target: str
    on: tuple[type[BaseException], ...]
    input: StateCallback | None = None

    @property
    def label(self) -> str:
        return f"error_edge {self.source} -> {self.target}"


def member(
    agent: Any,
    *,
    as_: str | None = None,
    timeout: float | None = None,
    retries: int = 0,
    retry_on: Any = None,
    retry_delay: float = 0,
    history: bool = False,
    context: bool = False,
) -> Member:
    """Declare a Swarm member with its policy; caller history and context are opt-in."""
    owner = f"member({getattr(agent, '__qualname__', agent)!r})"
    if as_ is not None:
        checked_name(as_, f"{owner}: as_")
    refuse_non_agent_member(agent, "")
    return Member(
        agent=checked_participant(agent, owner),
        as_=as_,
        policy=checked_policy(owner, timeout=timeout, retries=retries, retry_on=retry_on, retry_delay=retry_delay),
        history=checked_flag(history, f"{owner}: history"),
        context=checked_flag(context, f"{owner}: context"),
    )


def node(
    assembly: Any,
    *,
    timeout: float | None = None,
    retries: int = 0,
    retry_on: Any = None,
    retry_delay: float = 0,
    history: bool = False,
    context: bool = False,
    input: StateCallback | None = None,
) -> NodeDeclaration:
    """Declare a Graph node's assembly with its policy, opt-ins and input mapper (its name is its key)."""
    owner = f"node({getattr(assembly, '__qualname__', assembly)!r})"
    return NodeDeclaration(
        assembly=checked_participant(assembly, owner),
        policy=checked_policy(owner, timeout=timeout, retries=retries, retry_on=retry_on, retry_delay=retry_delay),
        history=checked_flag(history, f"{owner}: history"),
        context=checked_flag(context, f"{owner}: context"),
        input=checked_callback(input, f"{owner}: input"),
    )


def edge(
    source: str | Sequence[str],
    target: str | Sequence[str],
    *,
    when: StateCallback | None = None,
    input: StateCallback | None = None,
    max_concurrency: int | None = None,
) -> Edge:
    """Declare a route, a bounded fan-out (a list target) or a wait-for-all fan-in (a list source)."""
    declared = Edge(_endpoints(source, "source"), _endpoints(target, "target"))
    label = declared.label
    if declared.fan_in and declared.fan_out:
        raise ConfigurationError(f"{label}: a list source and a list target in one edge are not a route; split it")
    if declared.fan_in and when is not None:
        raise ConfigurationError(f"{label}: a fan-in waits for every branch, so it cannot have a condition")
    if max_concurrency is not None and not declared.fan_out:
        raise ConfigurationError(f"{label}: max_concurrency applies only to a fan-out edge (a list target)")
    return Edge(
        declared.source,
        declared.target,
        when=checked_callback(when, f"{label}: when"),
        input=checked_callback(input, f"{label}: input"),
        max_concurrency=checked_optional_limit(max_concurrency, f"{label}: max_concurrency"),
    )


def error_edge(source: str, target: str, *, on: Any, input: StateCallback | None = None) -> ErrorEdge:
    """Declare where a node's failure of one of the ``on`` classes goes once its retries are spent."""
    label = f"error_edge {source!r} -> {target!r}"
    checked_name(source, f"{label}: source")
    checked_name(target, f"{label}: target")
    return ErrorEdge(
        source,
        target,
        on=exception_classes(on, f"{label}: on"),
        input=checked_callback(input, f"{label}: input"),
    )


def checked_name(name: Any, owner: str) -> str:
    """A node or participant name: a letter or '_' then up to 63 letters, digits, '_' or '-'."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ConfigurationError(
            f"{owner} must be a name of letters, digits, '_' or '-' starting with a letter or '_', got {name!r}"
        )
    return name


def checked_callback(callback: Any, owner: str) -> StateCallback | None:
    """A condition or input mapper: None, or a callable taking the Graph.State."""
    if callback is None:
        return None
    if not callable(callback) or not takes_arguments(callback, 1):
        raise ConfigurationError(f"{owner} must be a callable taking the Graph.State, got {callback!r}")
    return callback  # type: ignore[no-any-return]


def _endpoints(declared: Any, role: str) -> str | tuple[str, ...]:
    if isinstance(declared, str):
        return checked_name(declared, f"edge {role}")
    if not isinstance(declared, Sequence) or isinstance(declared, bytes):
        raise ConfigurationError(f"edge {role} must be a node name or a list of them, got {declared!r}")
    names = tuple(checked_name(name, f"edge {role}") for name in declared)
    if len(names) < 2:
        raise ConfigurationError(
            f"edge {role} {list(names)} lists fewer than two nodes; name a single node without a list"
        )
    if len(set(names)) != len(names):
        raise ConfigurationError(f"edge {role} {list(names)} names a node twice")
    return names


def _endpoint(endpoint: str | tuple[str, ...]) -> str:
    return endpoint if isinstance(endpoint, str) else f"[{', '.join(endpoint)}]"


__all__ = [
    "Edge",
    "ErrorEdge",
    "Member",
    "Node",
    "NodeDeclaration",
    "StateCallback",
    "checked_callback",
    "checked_name",
    "edge",
    "error_edge",
    "member",
    "node",
]
