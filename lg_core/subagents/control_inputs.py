"""The inputs of the tools a parent's model uses to manage subagents, and their checks.

A parent whose agent declares subagents gets five tools: ``spawn_subagent``,
``send_subagent_message``, ``interject_subagent``, ``wait_for_subagents`` and
``list_subagents``. Their arguments come from a model, so they are parsed here
with Pydantic (unknown fields refused, sizes bounded by the manager's limits)
and a bad call becomes one readable sentence for the model rather than an
exception that ends the parent's run. The JSON Schemas the model is shown are
generated from the same models, so what is offered and what is accepted agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lg_core.errors import InvocationError
from lg_core.subagents.agent_path import validate_name
from lg_core.subagents.limits import MAX_LIST_LIMIT, ManagerLimits

SPAWN = "spawn_subagent"
SEND = "send_subagent_message"
INTERJECT = "interject_subagent"
WAIT = "wait_for_subagents"
LIST = "list_subagents"
CONTROL_TOOL_NAMES = (SPAWN, SEND, INTERJECT, WAIT, LIST)

# A subagent id is the child's agent path: ``/root`` and at most 8 names of 40 characters.
MAX_SUBAGENT_ID_CHARS = 5 + 8 * 41
MAX_CURSOR_CHARS = 256

Mode = Literal["sync", "async"]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


class SpawnInput(_Input):
    """Start a new child conversation of ``kind`` named ``task_name`` with its first ``task``."""

    kind: str = Field(min_length=1, max_length=64)
    task_name: str = Field(min_length=1, max_length=40, description="lowercase letters, digits and underscores")
    task: str = Field(min_length=1)
    mode: Mode = "async"


class SendInput(_Input):
    """Queue a follow-up turn for an existing child (FIFO; never interrupts its current turn)."""

    subagent_id: str = Field(min_length=1, max_length=MAX_SUBAGENT_ID_CHARS)
    message: str = Field(min_length=1)
    mode: Mode = "async"


class InterjectInput(_Input):
    """Deliver ``message`` to a child's running turn at its next model boundary."""

    subagent_id: str = Field(min_length=1, max_length=MAX_SUBAGENT_ID_CHARS)
    message: str = Field(min_length=1)


class WaitInput(_Input):
    """Wait for progress of the named children, or of all of them."""

    subagent_ids: list[str] | None = Field(default=None, max_length=64)


class ListInput(_Input):
    """List children newest first, optionally of one ``kind``; ``cursor`` continues a listing."""

    kind: str | None = Field(default=None, min_length=1, max_length=64)
    limit: int = Field(default=20, ge=1, le=MAX_LIST_LIMIT)
    cursor: str | None = Field(default=None, max_length=MAX_CURSOR_CHARS)


INPUT_MODELS: dict[str, type[_Input]] = {
    SPAWN: SpawnInput,
    SEND: SendInput,
    INTERJECT: InterjectInput,
    WAIT: WaitInput,
    LIST: ListInput,
}


def input_schema(tool_name: str, kinds: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON Schema the model is shown for ``tool_name``; spawn's ``kind`` lists the declared kinds."""
    schema = INPUT_MODELS[tool_name].model_json_schema()
    if tool_name == SPAWN and kinds:
        schema["properties"]["kind"]["enum"] = list(kinds)
    schema.pop("title", None)
    return schema


def parse_input(tool_name: str, arguments: Any, limits: ManagerLimits, kinds: Sequence[str] = ()) -> _Input:
    """The checked input of one control-tool call; InvocationError with one sentence for the model."""
    model = INPUT_MODELS.get(tool_name)
    if model is None:
        raise InvocationError(f"{tool_name!r} is not a subagent tool; the tools are {', '.join(CONTROL_TOOL_NAMES)}")
    try:
        parsed = model.model_validate(arguments)
    except ValidationError as exc:
        raise InvocationError(f"{tool_name}: {_first_problem(exc)}") from None
    _check_against_limits(tool_name, parsed, limits, kinds)
    return parsed


def _check_against_limits(tool_name: str, parsed: _Input, limits: ManagerLimits, kinds: Sequence[str]) -> None:
    if isinstance(parsed, SpawnInput):
        if kinds and parsed.kind not in kinds:
            raise InvocationError(f"{tool_name}: unknown kind {parsed.kind!r}; the kinds are {', '.join(kinds)}")
        try:
            validate_name(parsed.task_name)
        except InvocationError as exc:
            raise InvocationError(f"{tool_name}: {exc}") from None
    message = getattr(parsed, "task", None) or getattr(parsed, "message", None)
    if message is not None and len(message) > limits.max_message_chars:
        raise InvocationError(
            f"{tool_name}: the message is {len(message)} characters; at most {limits.max_message_chars}. "
            "Send a shorter message"
        )


def _first_problem(error: ValidationError) -> str:
    """The first validation problem as ``field: message`` (the model fixes one thing at a time)."""
    problem = error.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in problem["loc"]) or "input"
    return f"{where}: {problem['msg']}"


__all__ = [
    "CONTROL_TOOL_NAMES",
    "INPUT_MODELS",
    "INTERJECT",
    "LIST",
    "SEND",
    "SPAWN",
    "WAIT",
    "InterjectInput",
    "ListInput",
    "SendInput",
    "SpawnInput",
    "WaitInput",
    "input_schema",
    "parse_input",
]
