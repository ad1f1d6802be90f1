"""What may take part in an assembly: an Agent, a Workflow, Swarm or Graph class, or a fixed definition.

A participant is recognised by its ``assembly_kind`` and ``assembly_id``, the same test
``Run.agent_class`` applies, so this package needs no import of ``lg_core.agent`` and an
Agent may later become an Assembly subclass without an import cycle. A builder given as a
participant is replaced by a fixed copy of its current definition when the enclosing
declaration is read: later edits to the builder change later definitions only.
"""

from __future__ import annotations

from typing import Any

from lg_core.errors import ConfigurationError

KINDS = ("agent", "workflow", "swarm", "graph")


def checked_participant(declared: Any, owner: str) -> Any:
    """``declared`` as a participant (a builder becomes its definition); ConfigurationError naming ``owner``."""
    if not isinstance(declared, type) and callable(getattr(declared, "definition", None)):
        declared = declared.definition()  # a builder: a fixed copy of what it declares now
    if participant_kind(declared) not in KINDS or not isinstance(getattr(declared, "assembly_id", None), str):
        raise ConfigurationError(
            f"{owner}: {declared!r} is not an assembly; give an Agent, Workflow, Swarm or Graph class, "
            "a builder or an AssemblyDefinition"
        )
    declared_definition = getattr(declared, "declared_definition", None)
    if isinstance(declared, type) and callable(declared_definition) and declared_definition() is None:
        raise ConfigurationError(
            f"{owner}: {declared.__qualname__} declares no complete {participant_kind(declared)}, so it cannot run; "
            "give a subclass that does"
        )
    return declared


def participant_kind(participant: Any) -> str | None:
    """``agent``, ``workflow``, ``swarm`` or ``graph``; None for anything else."""
    kind = getattr(participant, "assembly_kind", None)
    return kind if isinstance(kind, str) else None


def is_agent(participant: Any) -> bool:
    """Whether ``participant`` is an Agent class (a Swarm admits nothing else)."""
    return isinstance(participant, type) and participant_kind(participant) == "agent"


def refuse_non_agent_member(declared: Any, owner: str) -> None:
    """ConfigurationError unless ``declared`` is an Agent class: a Swarm admits nothing else."""
    if is_agent(declared):
        return
    shown = participant_label(declared) if participant_kind(declared) is not None else repr(declared)
    raise ConfigurationError(
        f"{owner}member {shown} is not an Agent; Swarm members must be Agent classes so that "
        "each transition is a direct model-to-model handoff (put other assemblies in a Graph or Workflow)"
    )


def participant_label(participant: Any) -> str:
    """How messages and diagrams name a participant: its class name, or its definition's id."""
    if isinstance(participant, type):
        return participant.__qualname__
    return f"{participant.assembly_id} ({participant_kind(participant)} definition)"


__all__ = [
    "KINDS",
    "checked_participant",
    "is_agent",
    "participant_kind",
    "participant_label",
    "refuse_non_agent_member",
]
