"""Assembly: the base of Workflow, Swarm and Graph, the classes that coordinate several participants.

A subclass's declarations are read and checked when the class is defined, as an Agent's
are: a complete declaration (a Graph with nodes, a Swarm with members, a Workflow with a
``perform``) is validated then and fixed as its :meth:`definition`, so a bad topology fails
at import, naming the node, edge or member at fault. A class declaring none of them is an
abstract base for others; its :meth:`validate` says what it lacks.

Running an assembly (``ask``, ``stream_ask``, ``start_execution``) is not built yet: these
classes declare, validate, describe and store definitions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from lg_core.assemblies.definition import AssemblyDefinition
from lg_core.assemblies.trajectory import Attempt, Step, Trajectory
from lg_core.errors import ConfigurationError
from lg_core.tool_declarations import underscored_name

ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,63}$")
AGENT_DECLARATIONS = (
    "agent_id",
    "capture_diagnostics",
    "detect_tool_loops",
    "limits",
    "model",
    "result_schema",
    "select_model",
    "system_prompt",
    "tools",
)
GRAPH_DECLARATIONS = ("nodes", "edges", "finish", "max_concurrency")
SWARM_DECLARATIONS = ("members", "handoffs", "max_handoff_repeats")


class Assembly:
    """Gives one coordinated group of participants the calling style of one Agent."""

    assembly_kind: ClassVar[str] = "assembly"
    assembly_id: ClassVar[str] = "assembly"
    description: ClassVar[str] = ""

    Step = Step
    Attempt = Attempt
    Trajectory = Trajectory

    # Class attributes this kind does not read, with what to do instead: as plain attributes they would be
    # accepted and silently ignored (a Graph declaring `model`, a Swarm spelling `handoff` for `handoffs`).
    _REFUSED: ClassVar[Mapping[str, str]] = dict.fromkeys(
        AGENT_DECLARATIONS,
        "that is an Agent declaration, and an assembly has no model loop of its own; declare it on its Agents",
    )
    _definition: ClassVar[AssemblyDefinition | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        for name in sorted(set(own) & set(cls._REFUSED)):
            raise ConfigurationError(
                f"{cls.__qualname__} declares `{name}`, which a {cls.assembly_kind} does not read: {cls._REFUSED[name]}"
            )
        cls.assembly_id = assembly_id_of(cls, own)
        if not isinstance(cls.description, str):
            raise ConfigurationError(f"{cls.__qualname__}.description must be a string")
        # A kind's own base class (Workflow, Swarm, Graph) declares nothing to read.
        cls._definition = None if vars(cls).get("_kind_base") else cls._read_definition()

    @classmethod
    def _read_definition(cls) -> AssemblyDefinition | None:
        """The class's checked definition, or None for an abstract base (a kind implements it)."""
        return None

    @classmethod
    def _incomplete(cls) -> str:
        """Why this class has no definition: what a concrete one must declare."""
        return f"{cls.__qualname__} is the {cls.assembly_kind} base class; subclass it"

    @classmethod
    def declared_definition(cls) -> AssemblyDefinition | None:
        """The definition fixed when the class was defined; None for an abstract base."""
        return cls._definition

    @classmethod
    def definition(cls) -> AssemblyDefinition:
        """The immutable definition of this class; ConfigurationError saying what an abstract base lacks."""
        if cls._definition is None:
            raise ConfigurationError(cls._incomplete())
        return cls._definition

    @classmethod
    def validate(cls) -> type[Assembly]:
        """This class when its declaration is complete and valid (checked when defined); else ConfigurationError."""
        cls.definition()
        return cls

    @classmethod
    def _new_definition(cls, spec: Any) -> AssemblyDefinition:
        return AssemblyDefinition(cls.assembly_kind, cls.assembly_id, cls.description, cls, spec)


def assembly_id_of(cls: type, own: Mapping[str, Any]) -> str:
    """The declared ``assembly_id``, else the class name in snake case without its kind (``SupportFlowGraph``
    -> ``support_flow``); ConfigurationError asking for one when neither is a valid id."""
    kind = str(getattr(cls, "assembly_kind", "assembly"))
    declared = own.get("assembly_id")
    if declared is None:
        derived = underscored_name(cls.__name__.lstrip("_"), kind)
        if ID_PATTERN.fullmatch(derived):
            return derived
        raise ConfigurationError(
            f"{cls.__qualname__}: the assembly_id derived from the class name, {derived!r}, is not valid "
            "(1-64 lowercase letters, digits, '_' or '-'); set assembly_id = '...' on the class"
        )
    return checked_id(declared, f"{cls.__qualname__}.assembly_id")


def checked_id(value: Any, owner: str) -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise ConfigurationError(f"{owner} must be 1-64 lowercase letters, digits, '_' or '-', got {value!r}")
    return value


__all__ = ["Assembly", "ID_PATTERN", "assembly_id_of", "checked_id"]
