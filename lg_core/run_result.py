"""RunResult: the final view of one invocation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lg_core.messages import Message
from lg_core.result_schema import StructuredResult
from lg_core.usage import Usage


@dataclass(frozen=True)
class RunResult:
    """Response message, complete conversation, state, usage and structured value."""

    message: Message | None
    stop_reason: str | None
    usage: Usage
    messages: tuple[Message, ...]
    state: Mapping[str, Any]
    structured_result: StructuredResult | None = None
    steps: tuple[Any, ...] = ()
    output_value: Any = field(default=None, repr=False)
    # A composite assembly's Trajectory over ``steps`` (lg_core.assemblies.trajectory); None for an Agent.
    trajectory: Any = field(default=None, repr=False)
    # The value of the tool call that ended the run (``{"tool": name, "value": ...}``, lg_core.tool.EndsRun).
    ended_by: Mapping[str, Any] | None = None
    # A Swarm's bounded account of its handoffs (SwarmProgress.summary()); None for other runs.
    journey: Mapping[str, Any] | None = None

    @property
    def text(self) -> str:
        return self.message.text if self.message is not None else ""

    @property
    def structured(self) -> bool:
        return self.structured_result is not None

    @property
    def output(self) -> Any:
        """The validated structured value when present, otherwise :attr:`text`."""
        if self.structured_result is None:
            return self.text
        return self.output_value if self.output_value is not None else self.structured_result.value

    def to_dict(self) -> dict[str, Any]:
        """Stored form; ``messages`` live in the message log and are not repeated."""
        return {
            "message": None if self.message is None else self.message.to_dict(),
            "stop_reason": self.stop_reason,
            "usage": self.usage.to_dict(),
            "state": dict(self.state),
            "structured_result": None
            if self.structured_result is None
            else {"schema_name": self.structured_result.schema_name, "value": self.structured_result.value},
            **({"steps": [step.to_dict() for step in self.steps]} if self.steps else {}),
            **({"ended_by": dict(self.ended_by)} if self.ended_by is not None else {}),
            **({"journey": dict(self.journey)} if self.journey is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], messages: tuple[Message, ...], output: Any = None) -> RunResult:
        structured = data.get("structured_result")
        return cls(
            message=None if data.get("message") is None else Message.from_dict(data["message"]),
            stop_reason=data.get("stop_reason"),
            usage=Usage.from_dict(data.get("usage")),
            messages=messages,
            state=data.get("state") or {},
            structured_result=None if structured is None else StructuredResult(**structured),
            output_value=output,
            ended_by=data.get("ended_by"),
            journey=data.get("journey"),
        )


__all__ = ["RunResult"]
