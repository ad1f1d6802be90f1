"""Request building: a ModelRequest as a Chat Completions request body.

The body always streams and asks for usage in the final chunk
(``stream_options.include_usage``), so a run's token accounting needs no
second call. Messages map one to one, except that a tool message carrying
several results becomes one ``role: tool`` message per result, which is how
Chat Completions answers parallel tool calls, followed by a user message with
the results' images and documents (tool messages take text only).

Another adapter speaking Chat Completions (``openrouter``) passes a
:class:`Dialect`: its name for messages, and the fields it adds to an
assistant message (OpenRouter takes reasoning back as ``reasoning_details``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from lg_core.content import Document, Image, Reasoning, Text, ToolResult, ToolUse
from lg_core.datamap import thaw
from lg_core.errors import ConfigurationError
from lg_core.messages import Message
from lg_core.models.request import ModelCapabilities, ModelRequest
from lg_core.providers._http.request import plain_settings

# Body keys the provider owns: a setting may not replace them (the stream parser relies on them).
RESERVED_SETTINGS = frozenset(
    {"model", "messages", "stream", "stream_options", "tools", "tool_choice", "response_format", "n"}
)
_SCHEMA_NAME = re.compile(r"[^a-zA-Z0-9_-]")


@dataclasses.dataclass(frozen=True)
class Dialect:
    """What an adapter speaking Chat Completions adds to the shared request building.

    ``adapter`` names it in messages; ``assistant_fields`` gives the extra fields of an
    assistant message on the wire.
    """

    adapter: str = "openai"
    assistant_fields: Callable[[Message], Mapping[str, Any]] | None = None


OPENAI = Dialect()


def build_body(
    request: ModelRequest, model_id: str, capabilities: ModelCapabilities, dialect: Dialect = OPENAI
) -> dict[str, Any]:
    """The JSON body for one streamed Chat Completions call."""
    body: dict[str, Any] = {
        "model": model_id,
        "messages": _messages(request, dialect),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [_tool(spec) for spec in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = _tool_choice(request.tool_choice)
    if request.output_schema is not None and capabilities.native_structured_output:
        body["response_format"] = _response_format(request.output_schema)
    body.update(
        plain_settings(request.settings, dialect.adapter, RESERVED_SETTINGS)
    )  # temperature, max_tokens, seed ...
    return body


def _messages(request: ModelRequest, dialect: Dialect) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    if request.system:
        wire.append({"role": "system", "content": request.system})
    for message in request.messages:
        wire.extend(_message(message, dialect))
    return wire


def _message(message: Message, dialect: Dialect) -> list[dict[str, Any]]:
    """One Message as one or more wire messages (tool results each become their own)."""
    results = message.tool_results
    if results:
        return [*(_tool_result(result) for result in results), *_tool_attachments(results)]
    if message.role == "assistant":
        return [_assistant(message, dialect)]
    return [{"role": message.role, "content": _content(message)}]


def _assistant(message: Message, dialect: Dialect) -> dict[str, Any]:
    """Text and tool calls; reasoning stays out (Chat Completions has no field that takes it back)
    unless the dialect adds one.

    Content may be null only beside tool calls: OpenAI rejects a null-content assistant message without them.
    """
    calls = [block for block in message.content if isinstance(block, ToolUse)]
    wire: dict[str, Any] = {"role": "assistant", "content": (message.text or None) if calls else message.text}
    if calls:
        wire["tool_calls"] = [
            {"id": use.id, "type": "function", "function": {"name": use.name, "arguments": json.dumps(use.input)}}
            for use in calls
        ]
    if dialect.assistant_fields is not None:
        wire.update(dialect.assistant_fields(message))
    return wire


def _tool_result(result: ToolResult) -> dict[str, Any]:
    """Tool messages take text only; an error result says so, since the wire has no error flag."""
    text = result.text or "(no text output)"
    if result.status == "error":
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": result.tool_use_id, "content": text}


def _tool_attachments(results: list[ToolResult]) -> list[dict[str, Any]]:
    """The images and documents of tool results, in one user message after the tool messages
    (which take text only), so the model still sees them."""
    parts: list[dict[str, Any]] = []
    for result in results:
        media = [block for block in result.content if isinstance(block, (Image, Document))]
        if media:
            parts.append({"type": "text", "text": f"Attachments returned by tool call {result.tool_use_id}:"})
            parts.extend(_part(block) for block in media)
    return [{"role": "user", "content": parts}] if parts else []


def _content(message: Message) -> str | list[dict[str, Any]]:
    """Plain text as a string (what every compatible server accepts); attachments as content parts."""
    blocks = [block for block in message.content if not isinstance(block, Reasoning)]
    if all(isinstance(block, Text) for block in blocks):
        return message.text
    return [_part(block) for block in blocks]


def _part(block: Any) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Image):
        return {"type": "image_url", "image_url": {"url": _data_url(block.media_type, block.data)}}
    if isinstance(block, Document):
        text = _document_text(block)
        if text is not None:
            return {"type": "text", "text": f"Document {block.name}:\n{text}"}
        return {"type": "file", "file": {"filename": block.name, "file_data": _data_url(block.media_type, block.data)}}
    raise ConfigurationError(f"Chat Completions cannot carry a {type(block).__name__} block in a user message")


def _document_text(document: Document) -> str | None:
    """A text document's content: Chat Completions takes only PDFs as file parts (OpenAI: send a
    file's text as text); None for binary documents."""
    media_type = document.media_type.split(";")[0].strip().lower()
    if not (media_type.startswith("text/") or media_type.endswith(("json", "xml", "yaml"))):
        return None
    try:
        return document.data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def _tool(spec: Any) -> dict[str, Any]:
    function = {"name": spec.name, "description": spec.description, "parameters": thaw(spec.input_schema)}
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    """``auto``/``none``/``required`` as they are; a tool name (or ``{"name": ...}``) forces that tool."""
    if isinstance(choice, Mapping) and "name" in choice and "type" not in choice:
        choice = choice["name"]
    if isinstance(choice, str) and choice not in ("auto", "none", "required"):
        return {"type": "function", "function": {"name": choice}}
    return thaw(choice)


def _response_format(output_schema: Mapping[str, Any]) -> dict[str, Any]:
    """Structured output: the result schema as ``json_schema``; the name must match ``[a-zA-Z0-9_-]{1,64}``.

    ``strict`` makes the schema a contract the model's output is decoded under, not a hint (without
    it OpenAI and OpenRouter only try to follow it). Result schemas are strict-mode schemas already:
    every object closed and every property required, checked when the Agent class is defined.
    """
    name = _SCHEMA_NAME.sub("_", str(output_schema.get("name") or "result"))[:64] or "result"
    json_schema: dict[str, Any] = {"name": name, "strict": True, "schema": thaw(output_schema["schema"])}
    if output_schema.get("description"):
        json_schema["description"] = str(output_schema["description"])
    return {"type": "json_schema", "json_schema": json_schema}


__all__ = ["Dialect", "OPENAI", "RESERVED_SETTINGS", "build_body"]
