"""ModelRequest, ModelResponse and ModelCapabilities: the provider contract.

A provider receives one ModelRequest and yields StreamEvents ending with
``message_stop`` whose ``data["response"]`` is the ModelResponse. Keeping the
contract this small is what lets the scripted provider, the HTTP providers
and a durable wrapper plug into the same agent loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from lg_core.cancellation import CancellationToken
from lg_core.content import Text, well_formed_text
from lg_core.datamap import thaw
from lg_core.messages import Message
from lg_core.usage import Usage

STOP_REASONS = ("end_turn", "tool_use", "max_tokens", "stop_sequence", "content_filter", "error", "other")


@dataclasses.dataclass(frozen=True, slots=True)
class ModelCapabilities:
    """Optional features a model supports; ``supported_parameters=None`` means unrestricted."""

    native_structured_output: bool = False
    tools: bool = False
    tool_choice: bool = False
    supported_parameters: tuple[str, ...] | None = None
    known: bool = True

    def __post_init__(self) -> None:
        """Flags become booleans and the parameter names a tuple of unique strings (the
        spec's normalization); a single name is one name, never matched by substring."""
        for flag in ("native_structured_output", "tools", "tool_choice", "known"):
            object.__setattr__(self, flag, bool(getattr(self, flag)))
        names = self.supported_parameters
        if names is not None:
            names = (names,) if isinstance(names, str) else names
            object.__setattr__(self, "supported_parameters", tuple(dict.fromkeys(map(str, names))))

    @classmethod
    def permissive(cls) -> ModelCapabilities:
        return cls(native_structured_output=True, tools=True, tool_choice=True)

    @classmethod
    def unknown(cls) -> ModelCapabilities:
        return cls(known=False)

    def supports_parameter(self, *names: str) -> bool:
        if self.supported_parameters is None:
            return True
        return all(name in self.supported_parameters for name in names)


@dataclasses.dataclass(frozen=True, slots=True)
class ToolSpecification:
    """What the model sees of one tool."""

    name: str
    description: str
    input_schema: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        # A tool's schema is deeply frozen (Tool.input_schema); the wire form is plain JSON.
        return {"name": self.name, "description": self.description, "input_schema": thaw(self.input_schema)}


@dataclasses.dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything a provider needs for one model stream.

    ``metadata`` carries engine facts a provider may use but must not send
    (run id, frame, turn, and ``sequence``: how many model calls this
    conversation made before this one, stable across crash and resume).
    """

    messages: tuple[Message, ...]
    system: str | None = None
    tools: tuple[ToolSpecification, ...] = ()
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    output_schema: Mapping[str, Any] | None = None
    tool_choice: Any = None
    required_capabilities: tuple[str, ...] = ()
    cancellation_token: CancellationToken = dataclasses.field(default_factory=CancellationToken)
    deadline: datetime | None = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        """The spec's normalization, also on ``replace``: a callback may hand over plain dicts
        or strings as messages, and the provider still receives Message objects."""
        object.__setattr__(self, "messages", tuple(Message.coerce(message) for message in self.messages))
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "required_capabilities", tuple(dict.fromkeys(map(str, self.required_capabilities))))

    def replace(self, **changes: Any) -> ModelRequest:
        """A copy with ``changes`` applied (requests are immutable)."""
        return dataclasses.replace(self, **changes)

    def with_settings(self, **settings: Any) -> ModelRequest:
        return self.replace(settings={**self.settings, **settings})


@dataclasses.dataclass(frozen=True, slots=True)
class ModelResponse:
    """The final result of one provider stream."""

    message: Message
    stop_reason: str = "end_turn"
    usage: Usage = dataclasses.field(default_factory=Usage)
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        """The spec's coercion: an ``after_model`` replacement or a custom provider may give
        plain text or a dict, and the agent loop still reads an assistant Message."""
        object.__setattr__(self, "message", _well_formed(Message.coerce(self.message, role="assistant")))
        object.__setattr__(self, "stop_reason", str(self.stop_reason))

    @property
    def text(self) -> str:
        return self.message.text

    @property
    def tool_uses(self) -> list[Any]:
        return self.message.tool_uses


def _well_formed(message: Message) -> Message:
    """``message`` with every lone surrogate of its text as U+FFFD (``well_formed_text``).

    A reply decoded from JSON escapes that split an emoji's surrogate pair held
    a lone half: the store kept U+FFFD, but the live ``run.response`` kept the
    half, which no UTF-8 writer (``print``, a socket) accepts. Fixed here, the
    reply is the same in the live run, its events and the stored run.
    """
    texts = [well_formed_text(block.text) if isinstance(block, Text) else None for block in message.content]
    # A text is not None only for a Text block, which mypy cannot tie to ``block``: hence the ignores.
    if all(text is None or text is block.text for text, block in zip(texts, message.content, strict=True)):  # type: ignore[union-attr]
        return message  # well_formed_text returns its argument itself when nothing needs replacing
    content = tuple(
        block if text is None or text is block.text else block.model_copy(update={"text": text})  # type: ignore[union-attr]
        for text, block in zip(texts, message.content, strict=True)
    )
    return message.model_copy(update={"content": content})


__all__ = ["ModelCapabilities", "ModelRequest", "ModelResponse", "STOP_REASONS", "ToolSpecification"]
