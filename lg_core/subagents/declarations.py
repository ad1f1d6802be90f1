"""What an Agent class declares about delegation: managed subagents and agents exposed as tools.

    class CustomerSupportAgent(Agent):
        subagents = [subagent(ResearchAgent, kind="research",
                              description="Investigates policies and account history")]
        tools = [agent_as_tool(SentimentAgent, name="classify_sentiment"),
                 assembly_as_tool(InvestigationGraph, name="investigate_support_request")]

Each call returns a frozen declaration, checked when it is made: the class is of
the right kind, names fit the model-visible alphabets, tool overrides are Tool
classes, and an assembly that is not an Agent refuses the Agent-only ``model``
and ``tools`` overrides, as does a subagent declaring a ``factory`` (the factory
chooses the class). An override is applied, when the declaring class is defined,
by a subclass of the delegate (lg_core.assemblies.agent_overrides). A declaration names classes only, never instances: a
delegated conversation's turns run on any worker, which rebuilds the delegated
agent from its class.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lg_core.assemblies.agent_overrides import agent_with_overrides, override_attribute
from lg_core.assemblies.assembly_tools import assembly_tool_class
from lg_core.errors import ConfigurationError
from lg_core.subagents.definition import Definition, check_description, check_kind
from lg_core.subagents.limits import positive_seconds
from lg_core.tool import Tool
from lg_core.tool_declarations import NAME_PATTERN

ASSEMBLY_KINDS = ("agent", "workflow", "swarm", "graph")


@dataclass(frozen=True, slots=True)
class SubagentDeclaration:
    """``subagent(...)``: an agent class the parent's model may spawn conversations with, under ``kind``."""

    agent_class: type
    kind: str
    description: str
    model: Any = None
    tools: tuple[type, ...] | None = None
    factory: Callable[..., Any] | None = None
    persist: bool = True

    def for_owner(self, owner: type) -> SubagentDeclaration:
        """This declaration as the Agent class ``owner`` offers it: a ``model=``/``tools=`` override is
        applied by a subclass of the agent class importable on any worker (lg_core.assemblies.agent_overrides),
        so every turn of a child, wherever it runs, runs with the override."""
        if self.model is None and self.tools is None:
            return self
        attribute = override_attribute("subagent", self.kind)
        label = f"subagent {self.kind!r}"
        delegate = agent_with_overrides(owner, self.agent_class, attribute, label, model=self.model, tools=self.tools)
        return replace(self, agent_class=delegate)

    def definition(self) -> Definition:
        """The manager's Definition: the declared factory, else one returning the agent class."""
        agent_class = self.agent_class
        factory = self.factory if self.factory is not None else (lambda agent_path: agent_class)
        return Definition(self.kind, self.description, factory, persist=self.persist)


@dataclass(frozen=True, slots=True)
class AssemblyToolDeclaration:
    """``agent_as_tool(...)`` / ``assembly_as_tool(...)``: an Agent or assembly the model calls as one tool.

    ``preserve_context`` keeps the delegated conversation's history between calls
    of this tool in one run, which serializes those calls.
    """

    assembly_class: type
    name: str
    description: str
    model: Any = None
    tools: tuple[type, ...] | None = None
    preserve_context: bool = False

    @property
    def assembly_kind(self) -> str:
        return str(self.assembly_class.assembly_kind)  # type: ignore[attr-defined]

    def tool_class(self, owner: type) -> type[Tool]:
        """The Tool class ``owner`` (the declaring class) offers for this declaration."""
        return assembly_tool_class(
            owner,
            self.assembly_class,
            self.name,
            self.description,
            model=self.model,
            tools=self.tools,
            preserve_context=self.preserve_context,
        )


def subagent(
    agent_class: type,
    *,
    kind: str | None = None,
    description: str | None = None,
    model: Any = None,
    tools: Sequence[type] | None = None,
    factory: Callable[..., Any] | None = None,
    persist: bool = True,
) -> SubagentDeclaration:
    """Offer ``agent_class`` as a managed subagent; ``kind`` defaults to its agent_id, ``description`` to its own."""
    _check_kind_of(agent_class, ("agent",), "subagent")
    kind = check_kind(agent_class.agent_id if kind is None else kind)  # type: ignore[attr-defined]
    description = check_description(_description(agent_class, description), kind)
    if factory is not None and not callable(factory):
        raise ConfigurationError(f"subagent {kind!r}: factory must be callable, got {type(factory).__name__}")
    if not isinstance(persist, bool):
        raise ConfigurationError(f"subagent {kind!r}: persist must be True or False")
    if factory is not None and (model is not None or tools is not None):
        overridden = "model" if model is not None else "tools"
        raise ConfigurationError(
            f"subagent {kind!r}: a factory returns the agent class each child runs, so {overridden}= has no class "
            f"to override; declare {overridden} on the class the factory returns"
        )
    declaration = SubagentDeclaration(
        agent_class, kind, description, model, _tool_overrides(tools, f"subagent {kind!r}"), factory, persist
    )
    declaration.definition()  # the factory's arity is checked with the definition's rules
    return declaration


def agent_as_tool(
    agent_class: type,
    *,
    name: str | None = None,
    description: str | None = None,
    model: Any = None,
    tools: Sequence[type] | None = None,
    preserve_context: bool = False,
) -> AssemblyToolDeclaration:
    """Expose ``agent_class`` as one ordinary tool; its result is returned to the current turn."""
    _check_kind_of(agent_class, ("agent",), "agent_as_tool")
    return _tool_declaration(agent_class, name, description, model, tools, preserve_context)


def assembly_as_tool(
    assembly_class: type,
    *,
    name: str | None = None,
    description: str | None = None,
    model: Any = None,
    tools: Sequence[type] | None = None,
    preserve_context: bool = False,
) -> AssemblyToolDeclaration:
    """Expose an Agent, Workflow, Swarm or Graph as one tool; ``model``/``tools`` are for an Agent only."""
    kind = _check_kind_of(assembly_class, ASSEMBLY_KINDS, "assembly_as_tool")
    if kind != "agent" and (model is not None or tools is not None):
        overridden = "model" if model is not None else "tools"
        raise ConfigurationError(
            f"assembly_as_tool({assembly_class.__qualname__}): {overridden}= overrides an Agent's own {overridden}; "
            f"a {kind} has no single model or tool list to override. Declare it on the {kind}'s members"
        )
    return _tool_declaration(assembly_class, name, description, model, tools, preserve_context)


def agents_as_tools(*agent_classes: type, **options: Any) -> tuple[AssemblyToolDeclaration, ...]:
    """``agent_as_tool`` for each class with the same options: ``tools = [*agents_as_tools(A, B)]``."""
    _refuse_shared_name(options, "agents_as_tools")
    return tuple(agent_as_tool(cls, **options) for cls in agent_classes)


def assemblies_as_tools(*assembly_classes: type, **options: Any) -> tuple[AssemblyToolDeclaration, ...]:
    """``assembly_as_tool`` for each class with the same options."""
    _refuse_shared_name(options, "assemblies_as_tools")
    return tuple(assembly_as_tool(cls, **options) for cls in assembly_classes)


def check_long_poll_duration(value: object, owner: str) -> float:
    """``subagent_long_poll_duration``, a positive finite number of seconds, as a float."""
    return positive_seconds(value, f"{owner}.subagent_long_poll_duration")


def _tool_declaration(
    cls: type, name: str | None, description: str | None, model: Any, tools: Any, preserve_context: bool
) -> AssemblyToolDeclaration:
    tool_name = cls.assembly_id if name is None else name  # type: ignore[attr-defined]
    if not isinstance(tool_name, str) or not NAME_PATTERN.fullmatch(tool_name):
        raise ConfigurationError(
            f"{cls.__qualname__} as a tool: the name must be 1-64 letters, digits, '_' or '-'; got {tool_name!r}"
        )
    text = _description(cls, description)
    if not text.strip():
        raise ConfigurationError(
            f"{cls.__qualname__} as the tool {tool_name!r} needs a description the model can choose it by "
            "(pass description= or give the class a description)"
        )
    if not isinstance(preserve_context, bool):
        raise ConfigurationError(f"tool {tool_name!r}: preserve_context must be True or False")
    overrides = _tool_overrides(tools, f"tool {tool_name!r}")
    return AssemblyToolDeclaration(cls, tool_name, text, model, overrides, preserve_context)


def _check_kind_of(cls: object, kinds: tuple[str, ...], where: str) -> str:
    kind = getattr(cls, "assembly_kind", None) if isinstance(cls, type) else None
    if kind not in kinds:
        wanted = "an Agent class" if kinds == ("agent",) else "an Agent, Workflow, Swarm or Graph class"
        shown = cls.__qualname__ if isinstance(cls, type) else f"a {type(cls).__name__}"
        raise ConfigurationError(f"{where} takes {wanted}, got {shown}")
    if getattr(cls, "__abstractmethods__", None):
        raise ConfigurationError(f"{where}: {getattr(cls, '__qualname__', cls)} is abstract")
    return str(kind)


def _description(cls: type, description: str | None) -> str:
    text = getattr(cls, "description", "") if description is None else description
    if not isinstance(text, str):
        raise ConfigurationError(f"{cls.__qualname__}: description must be a string")
    return text


def _tool_overrides(tools: Sequence[type] | None, owner: str) -> tuple[type, ...] | None:
    """Tool overrides as a tuple of Tool classes: instances would be shared between conversations."""
    if tools is None:
        return None
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise ConfigurationError(f"{owner}: tools= must be a list of Tool classes")
    for tool in tools:
        if not (isinstance(tool, type) and issubclass(tool, Tool)):
            shown = tool.__qualname__ if isinstance(tool, type) else f"a {type(tool).__name__} instance"
            raise ConfigurationError(f"{owner}: tool overrides must be Tool classes, got {shown}")
    return tuple(tools)


def _refuse_shared_name(options: dict[str, Any], where: str) -> None:
    if "name" in options:
        raise ConfigurationError(f"{where} exposes several classes; one name= cannot name them all")


__all__ = [
    "ASSEMBLY_KINDS",
    "AssemblyToolDeclaration",
    "SubagentDeclaration",
    "agent_as_tool",
    "agents_as_tools",
    "assemblies_as_tools",
    "assembly_as_tool",
    "check_long_poll_duration",
    "subagent",
]
