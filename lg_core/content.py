"""Content blocks: the shared vocabulary of messages.

Text, attachments, tool activity and reasoning move between agents, providers,
tools and the run store without leaking a provider's wire format. Blocks are a
discriminated union on ``kind`` and serialize through one adapter
(:func:`serialize` / :func:`from_dict`); binary data becomes strict base64.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from lg_core.datamap import to_json_value

_FROZEN = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=False)


def _as_bytes(value: Any, field: str) -> bytes:
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, bytes):
        return value
    raise TypeError(f"{field} must be bytes, got {type(value).__name__}")


_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed_text(text: str) -> str:
    """``text`` as valid Unicode: surrogate pairs joined, each lone surrogate replaced by U+FFFD.

    Python strings may hold surrogates that are not valid Unicode: the file names
    and process output that ``os.fsdecode`` and ``errors="surrogateescape"`` give
    for bytes that are not UTF-8, or the two halves of an emoji decoded from
    separate JSON escapes. No store, JSON writer or provider accepts them, so a
    tool's output carrying one failed the run's commit. User input is refused
    instead (``Invocation.check_storable``): its author can fix it.
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class Text(BaseModel):
    """Model-visible text."""

    model_config = _FROZEN
    kind: Literal["text"] = "text"
    text: str


class Image(BaseModel):
    """Binary image data with its MIME type and an optional display name."""

    model_config = _FROZEN
    kind: Literal["image"] = "image"
    data: bytes
    media_type: str
    name: str | None = None

    @field_validator("data", mode="before")
    @classmethod
    def _bytes(cls, value: Any) -> bytes:
        return _as_bytes(value, "Image.data")

    @field_validator("media_type")
    @classmethod
    def _image_type(cls, value: str) -> str:
        if not value.startswith("image/"):
            raise ValueError(f"Image.media_type must be an image/* type, got {value!r}")
        return value


class Document(BaseModel):
    """Binary document data with its MIME type and a display name."""

    model_config = _FROZEN
    kind: Literal["document"] = "document"
    data: bytes
    media_type: str
    name: str

    @field_validator("data", mode="before")
    @classmethod
    def _bytes(cls, value: Any) -> bytes:
        return _as_bytes(value, "Document.data")


class ToolUse(BaseModel):
    """One tool call requested by the model."""

    model_config = _FROZEN
    kind: Literal["tool_use"] = "tool_use"
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    # Why the arguments the model wrote are not valid input although they decoded (NaN or Infinity,
    # which JSON has no value for, kept in ``input`` as the text the model wrote): the call is
    # answered with this error, as a schema violation is, instead of running the tool.
    input_error: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        """The arguments are a JSON object (the spec's DataMap): string keys, JSON values."""
        if not isinstance(value, Mapping):
            return value  # pydantic names the wrong type ("Input should be a valid dictionary")
        return to_json_value(value, path="input")


class ToolResult(BaseModel):
    """The model-facing result for one ToolUse."""

    model_config = _FROZEN
    kind: Literal["tool_result"] = "tool_result"
    tool_use_id: str = Field(min_length=1)
    content: tuple[Text | Image | Document, ...]
    status: Literal["success", "error"]

    @model_validator(mode="before")
    @classmethod
    def _content(cls, values: Any) -> Any:
        """``content`` in the forms Message accepts: a string, one block, or a list of blocks and strings."""
        if isinstance(values, Mapping) and "content" in values:
            values = {**values, "content": _result_content(values["content"])}
        return values

    @property
    def text(self) -> str:
        return "".join(block.text for block in self.content if isinstance(block, Text))


_RESULT_BLOCKS = (Text, Image, Document)


def _result_content(value: Any) -> Any:
    """A ToolResult's content as a tuple of Text, Image and Document blocks.

    Normalized as Message's content is (content.normalize): a string or a single
    block stands for a list of one, and strings in a list become Text blocks.
    TypeError, as Message raises, for anything else, instead of the pile of
    pydantic errors that iterating a block as (field, value) pairs gave.
    """
    if isinstance(value, tuple) and all(type(block) in _RESULT_BLOCKS for block in value):
        return value  # the engine's own results: already blocks
    if isinstance(value, (str, Mapping)) or hasattr(value, "kind"):
        value = [value]
    if isinstance(value, (bytes, bytearray, memoryview)) or not isinstance(value, Iterable):
        raise TypeError(
            "ToolResult content must be a string, a Text, Image or Document block, "
            f"or a list of them, got {type(value).__name__}"
        )
    blocks = tuple(normalize(part) for part in value)
    other = sorted({type(block).__name__ for block in blocks if not isinstance(block, _RESULT_BLOCKS)})
    if other:
        raise TypeError(f"ToolResult content holds only Text, Image and Document blocks, got {', '.join(other)}")
    return blocks


class Reasoning(BaseModel):
    """Provider reasoning: visible text, a signature, or opaque redacted bytes."""

    model_config = _FROZEN
    kind: Literal["reasoning"] = "reasoning"
    text: str = ""
    signature: str | None = None
    redacted_content: bytes | None = None
    details: tuple[dict[str, Any], ...] | None = None

    @model_validator(mode="after")
    def _exclusive(self) -> Reasoning:
        if self.redacted_content is not None and (self.text or self.signature):
            raise ValueError("Reasoning.redacted_content excludes text and signature")
        return self


Content = Annotated[Text | Image | Document | ToolUse | ToolResult | Reasoning, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Content)
_BINARY_FIELDS = {"image": ("data",), "document": ("data",), "reasoning": ("redacted_content",)}


def serialize(block: Any) -> dict[str, Any]:
    """The JSON-safe dict of ``block``; bytes become strict base64 text."""
    kind = type(block)
    # Text and ToolResult, the blocks of every tool step, are written out directly:
    # the same dict model_dump(exclude_none=True) gives (no field can be None),
    # without a pydantic serializer call (a tool step serializes several blocks).
    if kind is Text:
        return {"kind": "text", "text": block.text}
    if kind is ToolResult:
        return {
            "kind": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": [serialize(part) for part in block.content],
            "status": block.status,
        }
    data: dict[str, Any] = block.model_dump(exclude_none=True)
    for field in _BINARY_FIELDS.get(data["kind"], ()):
        if data.get(field) is not None:
            data[field] = base64.b64encode(data[field]).decode("ascii")
    if data["kind"] == "tool_result":
        data["content"] = [serialize(part) for part in block.content]
    if data["kind"] == "reasoning" and data.get("details") is not None:
        data["details"] = list(data["details"])
    return data


def from_dict(value: Mapping[str, Any]) -> Any:
    """Rebuild a block from :func:`serialize` output."""
    data = dict(value)
    kind = data.get("kind")
    for field in _BINARY_FIELDS.get(kind or "", ()):
        if isinstance(data.get(field), str):
            try:
                data[field] = base64.b64decode(data[field], validate=True)
            except binascii.Error as exc:
                raise ValueError(f"{kind}.{field} is not valid base64") from exc
    if kind == "tool_result" and isinstance(data.get("content"), list):
        data["content"] = tuple(from_dict(part) if isinstance(part, Mapping) else part for part in data["content"])
    return _ADAPTER.validate_python(data)


def normalize(value: Any) -> Any:
    """Accept an existing block, a string (a Text block), or a serialized dict."""
    if isinstance(value, (Text, Image, Document, ToolUse, ToolResult, Reasoning)):
        return value
    if isinstance(value, str):
        return Text(text=value)
    if isinstance(value, Mapping):
        return from_dict(value)
    raise TypeError(f"content must be a string, a content block or a serialized block dict, got {type(value).__name__}")


__all__ = [
    "Content",
    "Document",
    "Image",
    "Reasoning",
    "Text",
    "ToolResult",
    "ToolUse",
    "from_dict",
    "normalize",
    "serialize",
    "well_formed_text",
]
