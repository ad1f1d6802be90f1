"""The content a tool's value becomes for the model.

The spec: "Hashes and arrays returned by a tool are JSON-encoded; other values become
text." Content blocks (Text, Image, Document) returned by a tool are sent as blocks, and
a ``Tool.Result``'s artifacts as blocks of their own.
"""

from __future__ import annotations

import builtins
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from lg_core.content import Document, Image, Text, well_formed_text

if TYPE_CHECKING:
    from lg_core.tool import Artifact


_BLOCK_TYPES = (Text, Image, Document)


def content_blocks(value: Any) -> tuple[Any, ...] | None:
    """The blocks ``value`` is, when it is a content block or a non-empty list of them; else None.

    Rendered as text instead, a block's bytes failed JSON serialization and the
    model was told the tool had an internal error. A list mixing blocks with other
    values is refused: its image bytes would otherwise reach the model as text.
    """
    if isinstance(value, _BLOCK_TYPES):
        return (_well_formed(value),)
    if not isinstance(value, (list, tuple)) or not any(isinstance(item, _BLOCK_TYPES) for item in value):
        return None
    if not all(isinstance(item, _BLOCK_TYPES) for item in value):
        raise TypeError(
            "a tool returned a list mixing content blocks with other values; return only "
            "content blocks (wrap text in Text(text=...)) or only plain values"
        )
    return tuple(_well_formed(item) for item in value)


def _well_formed(block: Any) -> Any:
    """``block``, with a Text block's lone surrogates replaced as in :func:`render_value`."""
    if isinstance(block, Text) and well_formed_text(block.text) != block.text:
        return Text(text=well_formed_text(block.text))
    return block


def render_value(value: Any) -> str:
    """The text the model sees for a tool value.

    The spec: "Hashes and arrays returned by a tool are JSON-encoded; other values
    become text." Strings stay as they are, mappings, sequences and Pydantic models
    are JSON, None is empty and booleans are ``true``/``false`` (as JSON and the spec's
    Ruby write them); anything else is ``str(value)`` (a date reads ``2024-01-02``).
    The JSON is always valid, whatever the values inside (:func:`_json_ready`):
    NaN and infinities become ``null`` (as Pydantic writes them), bytes are decoded
    as UTF-8 with U+FFFD for invalid sequences (bytes returned alone too), sets
    become sorted lists and other values their ``str``.
    Lone surrogates become U+FFFD (:func:`lg_core.content.well_formed_text`).
    """
    return well_formed_text(_rendered(value))


def _rendered(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        try:
            return value.model_dump_json()
        except ValueError:  # PydanticSerializationError: bytes that are not UTF-8, say
            return json.dumps(_json_ready(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (builtins.bytes, bytearray, memoryview)):
        return _decoded(value)
    if isinstance(value, (Mapping, list, tuple, set, frozenset)):
        return json.dumps(_json_ready(value), ensure_ascii=False, allow_nan=False)
    return str(value)


def _json_ready(value: Any, path: tuple[int, ...] = ()) -> Any:
    """``value`` as plain JSON data that ``json.dumps(..., allow_nan=False)`` accepts.

    ``path`` holds the ids of the containers above ``value``: a container that holds
    itself is written as the text ``"<circular reference>"`` at the repeat.
    """
    if value is None or isinstance(value, (str, int)):  # bool is an int
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (builtins.bytes, bytearray, memoryview)):
        return _decoded(value)
    if isinstance(value, BaseModel):
        return _json_ready(_model_data(value), path)
    if not isinstance(value, (Mapping, list, tuple, set, frozenset)):
        return str(value)  # a date, a Decimal, an enum member
    if id(value) in path:
        return "<circular reference>"
    inner = (*path, id(value))
    if isinstance(value, Mapping):
        return {_json_key(key): _json_ready(item, inner) for key, item in value.items()}
    items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
    return [_json_ready(item, inner) for item in items]


def _json_key(key: Any) -> Any:
    """A key ``json.dumps`` writes as JSON writes it (str, int, bool, None, finite float), else its ``str``."""
    if key is None or isinstance(key, (str, int)) or (isinstance(key, float) and math.isfinite(key)):
        return key
    return str(key)


def _model_data(model: BaseModel) -> Any:
    """A Pydantic model as data: JSON mode (dates as ISO text), else Python mode for what JSON mode refuses."""
    try:
        return model.model_dump(mode="json")
    except ValueError:  # bytes that are not UTF-8 (UnicodeDecodeError, PydanticSerializationError)
        return model.model_dump()


def _decoded(data: builtins.bytes | bytearray | memoryview) -> str:
    return builtins.bytes(data).decode("utf-8", errors="replace")


def artifact_block(artifact: Artifact) -> Any:
    label = artifact.name or "artifact"
    data = artifact.data
    if data is None:
        # A deferred reference is the application's (a bucket key, a signed URL): the spec keeps
        # it out of diagnostics and treats it as no proof of access, so the model learns only that
        # the artifact exists. A tool that wants the model to cite it puts the id in its value.
        return Text(
            text=f"[artifact {label} ({artifact.media_type}) is stored by the application and not included here]"
        )
    if artifact.media_type.startswith("image/"):
        return Image(data=data, media_type=artifact.media_type, name=artifact.name)
    return Document(data=data, media_type=artifact.media_type, name=label)


__all__ = ["artifact_block", "content_blocks", "render_value"]
