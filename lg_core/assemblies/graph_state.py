"""Graph.State: the read-only routing data a Graph passes to its conditions and input mappers.

Conditions and mappers are application code running inside the Graph, so they get copies:
every value is copied when the state is built and the containers are read-only (mappings
become ``MappingProxyType``, lists tuples), so a callback can neither change the running
Graph's results nor see a later change to them. ``results`` holds every completed node's
RunResult by node name; ``incoming_results`` only the immediate predecessors supplying the
current node, in declaration order.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lg_core.messages import Message


def frozen_copy(value: Any) -> Any:
    """A deep, read-only copy of ``value``: mappings as MappingProxyType, sequences as tuples.

    A frozen dataclass (a RunResult) is rebuilt with its fields frozen in turn, so its
    ``state`` mapping is no more writable than the rest of the Graph.State.
    """
    if isinstance(value, Message) or value is None or isinstance(value, (str, bytes, int, float, bool)):
        return value  # immutable already
    if isinstance(value, Mapping):
        return MappingProxyType({key: frozen_copy(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen_copy(item) for item in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(frozen_copy(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(type(value), "__dataclass_params__", None)
        if params is not None and params.frozen:
            changes = {item.name: frozen_copy(getattr(value, item.name)) for item in dataclasses.fields(value)}
            return dataclasses.replace(value, **changes)
    return copy.deepcopy(value)


@dataclass(frozen=True)
class GraphState:
    """What a condition (about leaving ``current``) or an input mapper (for entering ``current``) may read."""

    input: Message | None
    results: Mapping[str, Any] = field(default_factory=dict)
    incoming_results: Mapping[str, Any] = field(default_factory=dict)
    current: str | None = None
    step: int = 1
    history: tuple[Message, ...] = ()
    context: Mapping[str, Any] = field(default_factory=dict)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        for name in ("results", "incoming_results", "history", "context"):
            object.__setattr__(self, name, frozen_copy(getattr(self, name)))
        if self.error is not None:
            object.__setattr__(self, "error", copy.copy(self.error))

    @property
    def predecessors(self) -> tuple[str, ...]:
        """The immediate predecessor names, in declaration order."""
        return tuple(self.incoming_results)

    @property
    def previous(self) -> str | None:
        """The predecessor's name when exactly one result supplies the current node, else None."""
        return self.predecessors[0] if len(self.incoming_results) == 1 else None

    def previous_result(self) -> Any:
        """The single predecessor's RunResult, or None when there is not exactly one."""
        previous = self.previous
        return None if previous is None else self.incoming_results[previous]

    def result(self, node_name: str) -> Any:
        """The completed RunResult of ``node_name``; KeyError naming the completed nodes otherwise."""
        try:
            return self.results[node_name]
        except KeyError:
            done = ", ".join(self.results) or "none yet"
            raise KeyError(f"node {node_name!r} has no completed result (completed: {done})") from None


__all__ = ["GraphState", "frozen_copy"]
