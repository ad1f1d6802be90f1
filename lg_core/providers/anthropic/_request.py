"""Request building: a ModelRequest as a Messages API request body.

The Messages API differs from Chat Completions in ways that shape this module:

* The system prompt is the top-level ``system``, not a message; a system message
  in the conversation joins it there.
* There are two roles. A tool message becomes a user message of ``tool_result``
  blocks (whose content may hold images and documents), and consecutive
  messages of one role are sent as one message.
* ``max_tokens`` is required: :data:`DEFAULT_MAX_TOKENS` unless a setting gives it.
* Extended thinking must be sent back with its signature when the model used a
  tool in the same turn, so Reasoning blocks that carry one (or redacted
  thinking) go back as they came; reasoning from other providers, which has no
  signature, cannot be sent and stays out.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from lg_core.content import Document, Image, Reasoning, Text, ToolResult, ToolUse
from lg_core.datamap import thaw
from lg_core.errors import ConfigurationError, UnsupportedInputError
from lg_core.messages import Message
from lg_core.models.request import ModelCapabilities, ModelRequest, ToolSpecification
from lg_core.providers._http.request import add_turn, chosen_tool, plain_settings, system_text

# Required by the API; small enough for every Claude model. A setting (or a model role's settings) raises it.
DEFAULT_MAX_TOKENS = 4096
# Body keys the provider owns: a setting may not replace them (the stream parser relies on them).
RESERVED_SETTINGS = frozenset({"model", "messages", "system", "stream", "tools", "tool_choice"})
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_TOOL_CHOICES = {"auto": "auto", "none": "none", "required": "any", "any": "any"}


def build_body(request: ModelRequest, model_id: str, capabilities: ModelCapabilities) -> dict[str, Any]:
    """The JSON body for one streamed Messages call."""
    body: dict[str, Any] = {
        "model": model_id,
        "max_tokens": DEFAULT_MAX_TOKENS,
        "messages": _messages(request),
        "stream": True,
    }
    system = system_text(request)
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [_tool(spec) for spec in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = _tool_choice(request.tool_choice)
    settings = plain_settings(request.settings, "anthropic", RESERVED_SETTINGS)  # max_tokens, temperature, thinking ...
    if request.output_schema is not None and capabilities.native_structured_output:
        settings["output_config"] = _output_config(settings.get("output_config"), request.output_schema)
    body.update(settings)
    return body


def _output_config(configured: Any, output_schema: Mapping[str, Any]) -> dict[str, Any]:
    """Structured output as ``output_config.format``, beside any other ``output_config`` setting (``effort``)."""
    if configured is not None and not isinstance(configured, Mapping):
        raise ConfigurationError(f"model setting 'output_config' must be a mapping, got {type(configured).__name__}")
    return {**(configured or {}), "format": {"type": "json_schema", "schema": thaw(output_schema["schema"])}}


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The conversation in the API's two roles; consecutive messages of one role become one."""
    wire: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _assistant_blocks(message) if role == "assistant" else _user_blocks(message)
        add_turn(wire, role, "content", blocks)
    return wire


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, Text):
            if block.text:
                blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolUse):
            blocks.append({"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)})
        elif isinstance(block, Reasoning):
            blocks.extend(_thinking(block))
        else:
            raise UnsupportedInputError(
                f"the anthropic adapter cannot send a {type(block).__name__} block in an assistant message; "
                "assistant messages hold text, tool calls and thinking"
            )
    return blocks


def _thinking(reasoning: Reasoning) -> list[dict[str, Any]]:
    """Claude's own thinking, as it came; reasoning without a signature (another provider's) stays out."""
    if reasoning.redacted_content is not None:
        return [{"type": "redacted_thinking", "data": reasoning.redacted_content.decode("utf-8", errors="replace")}]
    if reasoning.signature:
        return [{"type": "thinking", "thinking": reasoning.text, "signature": reasoning.signature}]
    return []


def _user_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ToolResult):
            blocks.append(_tool_result(block))
        elif isinstance(block, Text):
            if block.text:
                blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, (Image, Document)):
            blocks.append(_media(block))
        else:
            raise UnsupportedInputError(
                f"the anthropic adapter cannot send a {type(block).__name__} block in a {message.role} message"
            )
    return blocks


def _tool_result(result: ToolResult) -> dict[str, Any]:
    """A ``tool_result`` block; its images and documents go inside it, where the model sees them as the tool's."""
    wire: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.tool_use_id}
    content = [
        {"type": "text", "text": block.text} if isinstance(block, Text) else _media(block)
        for block in result.content
        if not (isinstance(block, Text) and not block.text)
    ]
    if content:
        wire["content"] = content
    if result.status == "error":
        wire["is_error"] = True
    return wire


def _media(block: Image | Document) -> dict[str, Any]:
    if isinstance(block, Image):
        return _image(block)
    return _document(block)


def _image(image: Image) -> dict[str, Any]:
    media_type = image.media_type.split(";")[0].strip().lower()
    if media_type not in IMAGE_TYPES:
        name = f" {image.name!r}" if image.name else ""
        raise UnsupportedInputError(
            f"the anthropic adapter cannot send image{name} of type {image.media_type!r}; "
            f"Claude accepts {', '.join(IMAGE_TYPES)}"
        )
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": _base64(image.data)}}


def _document(document: Document) -> dict[str, Any]:
    """A PDF as base64, a text document (text/*, JSON, XML, YAML) as plain text; Claude reads no other kind."""
    media_type = document.media_type.split(";")[0].strip().lower()
    if media_type == "application/pdf":
        source = {"type": "base64", "media_type": media_type, "data": _base64(document.data)}
    else:
        text = _document_text(media_type, document.data)
        if text is None:
            raise UnsupportedInputError(
                f"the anthropic adapter cannot send document {document.name!r} of type {document.media_type!r}; "
                "Claude reads PDFs and text documents (convert it to one of those)"
            )
        source = {"type": "text", "media_type": "text/plain", "data": text}
    return {"type": "document", "source": source, "title": document.name}


def _document_text(media_type: str, data: bytes) -> str | None:
    if not (media_type.startswith("text/") or media_type.endswith(("json", "xml", "yaml"))):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _tool(spec: ToolSpecification) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": thaw(spec.input_schema)}


def _tool_choice(choice: Any) -> dict[str, Any]:
    """``auto``/``none``, ``required`` (Anthropic's ``any``), or a tool name (or ``{"name": ...}``)
    that forces that tool; a mapping with a ``type`` is already Anthropic's form."""
    if isinstance(choice, Mapping) and "type" in choice:
        return dict(thaw(choice))
    choice = chosen_tool(choice)
    if choice in _TOOL_CHOICES:
        return {"type": _TOOL_CHOICES[choice]}
    return {"type": "tool", "name": choice}


__all__ = ["DEFAULT_MAX_TOKENS", "RESERVED_SETTINGS", "build_body"]
