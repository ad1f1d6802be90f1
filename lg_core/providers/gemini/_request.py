"""Request building: a ModelRequest as a ``streamGenerateContent`` request body.

The generateContent API differs from Chat Completions in ways that shape this module:

* The system prompt is ``systemInstruction``; a system message in the conversation
  joins it there.
* There are two roles, ``user`` and ``model``. A tool message becomes a user turn
  of ``functionResponse`` parts, which carry the function's *name* (a ToolResult
  has only the call's id, so the name is looked up from the call), and
  consecutive messages of one role are sent as one turn.
* Settings are ``generationConfig`` fields (``temperature``, ``maxOutputTokens``,
  ``thinkingConfig`` ...); a few request fields (``safetySettings``,
  ``cachedContent``) go beside it. ``max_tokens`` is accepted as the name the
  other adapters use.
* Thought signatures must go back on the part they came on (Gemini 3 refuses a
  function call sent without its signature). The stream parser keeps each
  signature as a Reasoning block placed just before the block of its part
  (:mod:`._signatures`); here it is put back on that part. Thought summaries are
  not sent back: Gemini reads nothing from unsigned thought text.
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
from lg_core.providers._http.request import (
    add_turn,
    chosen_tool,
    reserved_setting_error,
    system_text,
)
from lg_core.providers.gemini._schema import gemini_schema
from lg_core.providers.gemini._signatures import Signature, is_generated_id, signature_of

# Request fields that sit beside generationConfig; every other setting is a generationConfig field.
REQUEST_FIELDS = frozenset({"safetySettings", "cachedContent", "serviceTier", "labels"})
# What the adapter builds from the request; ``candidateCount`` because the stream parser reads one candidate.
RESERVED_SETTINGS = frozenset({"contents", "systemInstruction", "tools", "toolConfig", "model", "candidateCount"})
SETTING_ALIASES = {"max_tokens": "maxOutputTokens"}
IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/heic", "image/heif")
_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY", "any": "ANY"}


def build_body(request: ModelRequest, model_id: str, capabilities: ModelCapabilities) -> dict[str, Any]:
    """The JSON body for one streamed generateContent call (the model is named in the URL)."""
    body: dict[str, Any] = {"contents": _contents(request)}
    system = system_text(request)
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if request.tools:
        body["tools"] = [{"functionDeclarations": [_declaration(spec) for spec in request.tools]}]
        if request.tool_choice is not None:
            body["toolConfig"] = {"functionCallingConfig": _tool_choice(request.tool_choice)}
    fields, generation = _settings(request.settings)
    if request.output_schema is not None and capabilities.native_structured_output:
        schema = request.output_schema
        generation["responseMimeType"] = "application/json"
        generation["responseSchema"] = gemini_schema(schema["schema"], f"result schema {schema.get('name')!r}")
    if generation:
        body["generationConfig"] = generation
    body.update(fields)
    return body


def _settings(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(request fields, generationConfig)`` from the model settings, which are trusted application
    values sent as given (the spec: build them in application code). A name may be snake_case
    (``max_output_tokens``) or Gemini's camelCase; a ``generationConfig`` mapping is merged in."""
    fields: dict[str, Any] = {}
    generation: dict[str, Any] = {}
    for key, value in settings.items():
        name = SETTING_ALIASES.get(str(key)) or _camel(str(key))
        if name in RESERVED_SETTINGS:
            raise reserved_setting_error(key, "gemini", RESERVED_SETTINGS)
        if name == "generationConfig":
            if not isinstance(value, Mapping):
                raise ConfigurationError(f"model setting {key!r} must be a mapping of generationConfig fields")
            generation.update(thaw(value))
        elif name in REQUEST_FIELDS:
            fields[name] = thaw(value)
        else:
            generation[name] = thaw(value)
    return fields, generation


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _contents(request: ModelRequest) -> list[dict[str, Any]]:
    """The conversation in the API's two roles; consecutive messages of one role become one turn."""
    names: dict[str, str] = {}  # tool call id -> function name, for the function responses
    wire: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        if message.role == "assistant":
            role, parts = "model", _model_parts(message)
            names.update((use.id, use.name) for use in message.tool_uses)
        else:
            role, parts = "user", _user_parts(message, names)
        add_turn(wire, role, "parts", parts)
    return wire


def _model_parts(message: Message) -> list[dict[str, Any]]:
    """Text and function calls, each signature back on the part it came on."""
    parts: list[dict[str, Any]] = []
    pending: Signature | None = None  # a signature waiting for the block of its part
    for block in message.content:
        if isinstance(block, Reasoning):
            signature = signature_of(block)
            if signature is not None:
                if pending is not None:
                    parts.append(pending.alone())
                pending = signature
            elif pending is not None and pending.part == "thought" and block.text:
                parts.append(pending.on({"text": block.text, "thought": True}))
                pending = None
            continue  # unsigned reasoning: Gemini's thought summaries, or another provider's
        part = _model_part(block)
        if part is None:
            continue
        if pending is not None:
            if pending.fits(part):
                part = pending.on(part)
            else:
                parts.append(pending.alone())
            pending = None
        parts.append(part)
    if pending is not None:
        parts.append(pending.alone())
    return parts


def _model_part(block: Any) -> dict[str, Any] | None:
    if isinstance(block, Text):
        return {"text": block.text} if block.text else None
    if isinstance(block, ToolUse):
        call: dict[str, Any] = {"name": block.name, "args": dict(block.input)}
        if not is_generated_id(block.id):
            call["id"] = block.id
        return {"functionCall": call}
    raise UnsupportedInputError(
        f"the gemini adapter cannot send a {type(block).__name__} block in an assistant message; "
        "assistant messages hold text, tool calls and reasoning"
    )


def _user_parts(message: Message, names: Mapping[str, str]) -> list[dict[str, Any]]:
    """Function responses first (Gemini matches them to the calls of the turn before), then the
    text and media, then the media the tools returned (a function response holds JSON only)."""
    responses: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    attachments: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ToolResult):
            responses.append(_function_response(block, names))
            attachments.extend(_attachments(block, names))
        elif isinstance(block, Text):
            if block.text:
                parts.append({"text": block.text})
        elif isinstance(block, (Image, Document)):
            parts.append(_media(block))
        elif not isinstance(block, Reasoning):
            raise UnsupportedInputError(
                f"the gemini adapter cannot send a {type(block).__name__} block in a {message.role} message"
            )
    return [*responses, *parts, *attachments]


def _function_response(result: ToolResult, names: Mapping[str, str]) -> dict[str, Any]:
    """The result under ``output``, or under ``error`` for a failed call: the keys Google documents."""
    response: dict[str, Any] = {
        "name": _call_name(result, names),
        "response": {"error" if result.status == "error" else "output": result.text},
    }
    if not is_generated_id(result.tool_use_id):
        response["id"] = result.tool_use_id
    return {"functionResponse": response}


def _attachments(result: ToolResult, names: Mapping[str, str]) -> list[dict[str, Any]]:
    media = [block for block in result.content if isinstance(block, (Image, Document))]
    if not media:
        return []
    intro = {"text": f"Attachments returned by tool call {_call_name(result, names)} ({result.tool_use_id}):"}
    return [intro, *(_media(block) for block in media)]


def _call_name(result: ToolResult, names: Mapping[str, str]) -> str:
    name = names.get(result.tool_use_id)
    if name is None:
        raise UnsupportedInputError(
            f"the gemini adapter cannot send the result of tool call {result.tool_use_id!r}: the call is not in "
            "the conversation, and Gemini names each function response after the function called"
        )
    return name


def _media(block: Image | Document) -> dict[str, Any]:
    """Images, PDFs, audio and video as inline data; text documents as text/plain inline data."""
    media_type = block.media_type.split(";")[0].strip().lower()
    if isinstance(block, Image):
        if media_type not in IMAGE_TYPES:
            name = f" {block.name!r}" if block.name else ""
            raise UnsupportedInputError(
                f"the gemini adapter cannot send image{name} of type {block.media_type!r}; "
                f"Gemini accepts {', '.join(IMAGE_TYPES)}"
            )
        return _inline(media_type, block.data)
    if media_type == "application/pdf" or media_type.startswith(("audio/", "video/")):
        return _inline(media_type, block.data)
    if media_type.startswith("text/") or media_type.endswith(("json", "xml", "yaml")):
        try:
            block.data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return _inline(media_type if media_type.startswith("text/") else "text/plain", block.data)
    raise UnsupportedInputError(
        f"the gemini adapter cannot send document {block.name!r} of type {block.media_type!r}; "
        "Gemini reads PDFs, UTF-8 text documents, audio and video (convert it to one of those)"
    )


def _inline(media_type: str, data: bytes) -> dict[str, Any]:
    return {"inlineData": {"mimeType": media_type, "data": base64.b64encode(data).decode("ascii")}}


def _declaration(spec: ToolSpecification) -> dict[str, Any]:
    """A function declaration; a tool without parameters has none (Gemini refuses an OBJECT without properties)."""
    declaration: dict[str, Any] = {"name": spec.name, "description": spec.description}
    parameters = gemini_schema(spec.input_schema, f"tool {spec.name!r}")
    if parameters.get("type") != "OBJECT" or parameters.get("properties"):
        declaration["parameters"] = parameters
    return declaration


def _tool_choice(choice: Any) -> dict[str, Any]:
    """``auto``/``none``, ``required`` (Gemini's ``ANY``), or a tool name (or ``{"name": ...}``) that
    forces that function; a mapping with a ``mode`` is already Gemini's ``functionCallingConfig``."""
    if isinstance(choice, Mapping) and "mode" in choice:
        return dict(thaw(choice))
    choice = chosen_tool(choice)
    if choice in _MODES:
        return {"mode": _MODES[choice]}
    return {"mode": "ANY", "allowedFunctionNames": [choice]}


__all__ = ["IMAGE_TYPES", "REQUEST_FIELDS", "RESERVED_SETTINGS", "build_body"]
