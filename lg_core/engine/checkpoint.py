"""The agent loop's checkpoint: everything needed to continue a conversation.

It is written with every step, so it stays small and bounded: counters, the
tool calls of the current turn, usage and the working state. The conversation
itself lives in the append-only ``messages`` table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

FORMAT_VERSION = 1


@dataclass(slots=True)
class PendingTool:
    """One tool call of the current turn and where it stands."""

    id: str
    name: str
    key: str
    exclusive: bool = False
    status: str = "scheduled"  # scheduled | waiting (exclusive, behind another) | done
    input: dict[str, Any] | None = None  # kept only while waiting; scheduled calls carry it on their step row


@dataclass(slots=True)
class AgentCheckpoint:
    turn: int = 0
    phase: str = "model"  # model | tools | done
    message_count: int = 0
    model_calls: int = 0
    tool_calls_total: int = 0
    repairs: int = 0
    pending: list[PendingTool] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    last_text: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["v"] = FORMAT_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentCheckpoint:
        values = {k: v for k, v in data.items() if k != "v"}
        values["pending"] = [PendingTool(**item) for item in values.get("pending", [])]
        return cls(**values)

    def copy(self) -> AgentCheckpoint:
        return AgentCheckpoint.from_dict(self.to_dict())


__all__ = ["AgentCheckpoint", "PendingTool"]
