"""Swarm: Agent members that hand one request directly to one another, as a class or a builder.

    class ProblemSolverSwarm(Swarm):
        members = [TriageAgent, BillingAgent, member(AccountAgent, history=True, context=True)]
        start = TriageAgent
        handoffs = {TriageAgent: [BillingAgent, AccountAgent],
                    BillingAgent: [TriageAgent], AccountAgent: [TriageAgent]}
        max_steps = 10
        max_handoff_repeats = 2

One member is active at a time; it answers, or hands off through a tool listing only the
members its declared routes allow. ``max_steps`` (default 32) bounds member executions and
``max_handoff_repeats`` (default: no bound but ``max_steps``) how often one directed handoff
may repeat. Members are Agents only; caller history and context are opt-in per member.
Starts and handoffs name members by Agent class or by member name (``as_``). The
declarations are validated when the class is defined (see ``_swarm_rules``).

A Swarm is called as an Agent is and nests as a Graph node. Its run's frame holds its
progress (``_swarm_frame``); each member execution is a durable step running the member as
a child run (``_swarm_member``), whose model is offered the handoff tool of its declared
routes (``swarm_members``). The caller's stream carries ``handoff`` events and only the
final member's text; the result keeps the trajectory and the bounded journey.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from lg_core.assemblies._policy import checked_limit
from lg_core.assemblies._swarm_frame import run_spec, swarm_start
from lg_core.assemblies._swarm_member import SwarmMemberStep
from lg_core.assemblies._swarm_rules import DEFAULT_MAX_STEPS, SwarmSpec, handoff_pairs, swarm_spec, validate_swarm
from lg_core.assemblies.assembly import GRAPH_DECLARATIONS, Assembly
from lg_core.assemblies.builder import AssemblyBuilder
from lg_core.assemblies.declarations import Member, member
from lg_core.assemblies.definition import AssemblyDefinition
from lg_core.assemblies.trajectory import stored_assembly_result
from lg_core.engine.driven_frames import DrivenStart
from lg_core.errors import ConfigurationError
from lg_core.run_result import RunResult


class Swarm(Assembly):
    """Lets configured Agent members hand one request directly to one another."""

    assembly_kind: ClassVar[str] = "swarm"
    _kind_base: ClassVar[bool] = True

    members: ClassVar[Sequence[Any]] = ()
    start: ClassVar[Any] = None
    handoffs: ClassVar[Mapping[Any, Any]] = {}
    max_steps: ClassVar[int] = DEFAULT_MAX_STEPS
    max_handoff_repeats: ClassVar[int | None] = None

    _REFUSED: ClassVar[Mapping[str, str]] = {
        **Assembly._REFUSED,
        **dict.fromkeys(GRAPH_DECLARATIONS, "that is a Graph declaration"),
        "perform": "a Swarm's members hand off to one another; compose calls in Python with a Workflow",
        "member": "declare its Agents in `members = [Agent or member(Agent, ...)]`",
        "handoff": "declare its routes in `handoffs = {FromAgent: [ToAgent, ...]}`",
    }

    @classmethod
    def _read_definition(cls) -> AssemblyDefinition | None:
        owner = cls.__qualname__
        if isinstance(cls.members, (str, bytes)) or not isinstance(cls.members, Sequence):
            raise ConfigurationError(f"{owner}.members must be a list of Agent classes or member(...) values")
        spec = swarm_spec(
            owner,
            members=cls.members,
            start=cls.start,
            handoffs=handoff_pairs(cls.handoffs, owner),
            max_steps=cls.max_steps,
            max_handoff_repeats=cls.max_handoff_repeats,
        )
        if not spec.members:
            return None  # an abstract base: its subclasses declare the members
        validate_swarm(spec, owner)
        return cls._new_definition(spec)

    @classmethod
    def _incomplete(cls) -> str:
        return f"{cls.__qualname__} declares no members; list its Agents in `members`"

    # -- running (the engine calls these on the run's entrypoint class) ------------------------

    @classmethod
    def driven_start(cls, run: Any) -> DrivenStart:
        """A new run's frame and its start member's step; the definition is stored with it when it can be."""
        definition, stored = cls.started_definition(run)
        spec = definition.spec
        assert isinstance(spec, SwarmSpec)  # a Swarm's definition holds a SwarmSpec
        return swarm_start(spec, definition.assembly_id, run.invocation.message, stored)

    @classmethod
    def step_body(cls, scope: Any) -> SwarmMemberStep:
        """The body of one of the run's member steps, under the definition the run started with."""
        return SwarmMemberStep(scope, run_spec(scope.run.id, scope.frame.checkpoint.data.get("definition"), cls))

    @classmethod
    def stored_result(cls, stored: Mapping[str, Any]) -> RunResult:
        """The RunResult of a finished run read back from the store, with its trajectory and journey."""
        return stored_assembly_result(stored)

    @classmethod
    def to_builder(cls) -> SwarmBuilder:
        """A mutable SwarmBuilder seeded with this class's declarations."""
        return SwarmBuilder(base=cls)


class SwarmBuilder(AssemblyBuilder):
    """Builds a Swarm at runtime while keeping its members Agent-only."""

    kind = "swarm"
    default_base = Swarm

    def __init__(self, id: str | None = None, description: str | None = None, runtime: Any = None, base: Any = None):
        self._members: list[Member] = []
        self._start: Any = None
        self._handoffs: list[tuple[Any, Any]] = []
        self._max_steps = DEFAULT_MAX_STEPS
        self._max_handoff_repeats: int | None = None
        super().__init__(id=id, description=description, runtime=runtime, base=base)

    def member(self, agent: Any, **options: Any) -> SwarmBuilder:
        """Declare one Agent member (options as :func:`member`)."""
        self._members.append(member(agent, **options))
        return self

    def start(self, member: Any = None) -> Any:
        """Read or assign the initial member (an Agent class or a member name)."""
        if member is not None:
            self._start = member
        return self._start

    def handoff(self, source: Any, *, to: Any) -> SwarmBuilder:
        """Allow ``source`` to hand off to ``to`` (one member or a list)."""
        self._handoffs.append((source, to))
        return self

    def max_steps(self, value: int | None = None) -> int:
        """Read or assign the most member executions of one run."""
        if value is not None:
            self._max_steps = checked_limit(value, f"{type(self).__name__}.max_steps")
        return self._max_steps

    def max_handoff_repeats(self, value: int | None = None) -> int | None:
        """Read or assign how often one directed handoff may repeat."""
        if value is not None:
            self._max_handoff_repeats = checked_limit(value, f"{type(self).__name__}.max_handoff_repeats")
        return self._max_handoff_repeats

    def _seed(self, definition: AssemblyDefinition) -> None:
        spec = definition.spec
        assert isinstance(spec, SwarmSpec)
        self._members = list(spec.members)
        self._start = spec.start
        self._handoffs = [(source, list(targets)) for source, targets in spec.handoffs.items()]
        self._max_steps, self._max_handoff_repeats = spec.max_steps, spec.max_handoff_repeats

    def _spec(self, owner: str) -> SwarmSpec:
        spec = swarm_spec(
            owner,
            members=self._members,
            start=self._start,
            handoffs=self._handoffs,
            max_steps=self._max_steps,
            max_handoff_repeats=self._max_handoff_repeats,
        )
        validate_swarm(spec, owner)
        return spec


__all__ = ["Swarm", "SwarmBuilder"]
