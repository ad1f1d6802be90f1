"""Message: one participant's contribution to a conversation.

Messages are frozen values. Stored records carry a format version
(:data:`FORMAT_VERSION`) so the run store can migrate old rows deliberately.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_serializer, field_validator

from lg_core import content as content_mod
from lg_core.content import Reasoning, Text, ToolResult, ToolUse
from lg_core.datamap import FrozenDataMap

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
NO_METADATA = FrozenDataMap()  # shared: it cannot change
FORMAT_VERSION = 1


class Message(BaseModel):
    """A frozen message with a role, normalized content blocks and metadata."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    ROLES: ClassVar[tuple[str, ...]] = ROLES  # the roles Message accepts (spec Message::ROLES)
    role: Role
    content: tuple[content_mod.Content, ...]
    metadata: FrozenDataMap = NO_METADATA
    _stored: dict[str, Any] | None = PrivateAttr(default=None)

    def __init__(self, role: str | None = None, content: Any = None, **data: Any) -> None:
        if role is not None:
            data["role"] = role
        if content is not None:
            data["content"] = content
        super().__init__(**data)

    @field_validator("content", mode="before")
    @classmethod
    def _normalize_content(cls, value: Any) -> tuple[Any, ...]:
        if isinstance(value, (str, Mapping)) or hasattr(value, "kind"):
            value = [value]
        binary = isinstance(value, (bytes, bytearray, memoryview))
        if binary or not isinstance(value, Iterable):
            hint = " (wrap binary data in Image(...) or Document(...))" if binary else ""
            raise TypeError(f"content must be a string, a block, or a list of blocks, got {type(value).__name__}{hint}")
        return tuple(content_mod.normalize(part) for part in value)

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> FrozenDataMap:
        """Frozen like the message (the spec: "Metadata becomes a frozen DataMap")."""
        if isinstance(value, FrozenDataMap):
            return value
        if not value:
            return NO_METADATA
        return FrozenDataMap(value, path="metadata")

    @field_serializer("metadata")
    def _plain_metadata(self, metadata: FrozenDataMap) -> dict[str, Any]:
        return metadata.to_dict()

    def __eq__(self, other: object) -> bool:
        # Field equality only: the serialization cache (a private attribute) must not count.
        if not isinstance(other, Message):
            return NotImplemented
        return (self.role, self.content, self.metadata) == (other.role, other.content, other.metadata)

    __hash__ = None  # type: ignore[assignment]  # metadata compares equal to dicts: messages are not hashable

    @property
    def text(self) -> str:
        """Visible text blocks joined, without reasoning or tool content."""
        return "".join(block.text for block in self.content if isinstance(block, Text))

    @property
    def tool_uses(self) -> list[ToolUse]:
        return [block for block in self.content if isinstance(block, ToolUse)]

    @property
    def tool_results(self) -> list[ToolResult]:
        return [block for block in self.content if isinstance(block, ToolResult)]

    def without_reasoning(self) -> Message:
        """This message without Reasoning blocks (``self`` when there are none)."""
        if not any(isinstance(block, Reasoning) for block in self.content):
            return self
        kept = tuple(block for block in self.content if not isinstance(block, Reasoning))
        return Message(role=self.role, content=kept, metadata=self.metadata)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-safe representation, with its format version (a fresh dict you may change)."""
        data: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "role": self.role,
            "content": [content_mod.serialize(block) for block in self.content],
        }
        if self.metadata:
            data["metadata"] = self.metadata.to_dict()
        return data

    def to_json(self, **options: Any) -> str:
        """:meth:`to_dict` encoded as JSON; ``options`` go to :func:`json.dumps` (``indent=2``)."""
        return json.dumps(self.to_dict(), **options)

    def stored_form(self) -> dict[str, Any]:
        """:meth:`to_dict`, computed once per message: for the store and event log, read-only.

        A message is usually serialized twice per step (its row and the event that
        carries it); messages are frozen, so the first result can serve both.
        """
        # Declared with a private attribute (``_stored``), so pydantic keeps a dict here.
        private = cast("dict[str, Any]", self.__pydantic_private__)
        cached = private.get("_stored") if private else None
        if cached is None:
            cached = self.to_dict()
            private["_stored"] = cached
        return cached

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        version = data.get("v", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise ValueError(f"unsupported message format version {version}")
        missing = [key for key in ("role", "content") if key not in data]
        if missing:
            raise ValueError(f"a serialized message needs {missing}; got keys {sorted(data)}")
        return cls(
            role=data["role"],
            # normalized as Message() does: a string is one Text block, dicts are serialized blocks
            content=data["content"],
            metadata=data.get("metadata") or {},
        )

    @classmethod
    def of_blocks(cls, role: Role, blocks: Iterable[Any]) -> Message:
        """A message of content blocks that are already validated block models.

        For the engine, which assembles messages from blocks it built itself (a
        turn's tool results): the same Message as ``Message(role=role,
        content=blocks)``, without validating every block again.
        """
        return cls.model_construct(role=role, content=tuple(blocks))

    @classmethod
    def coerce(cls, value: Any, *, role: str = "user") -> Message:
        """Keep a Message; build one from a dict, a string or a list of blocks."""
        if isinstance(value, Message):
            return value
        if isinstance(value, Mapping):
            if "v" in value:
                return cls.from_dict(value)
            return cls(**{str(k): v for k, v in value.items()})
        return cls(role=role, content=value)


__all__ = ["FORMAT_VERSION", "Message", "ROLES", "Role"]
