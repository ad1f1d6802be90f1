"""Reading and validating a batch's JSONL input file, all of it, before anything starts.

Each non-blank line is one invocation of the batch's agent:

    "Where is order 481?"
    {"message": "Where is order 481?", "id": "order-481", "context": {"account_id": "a-2"},
     "actor_id": "user-7", "session_id": "s-1", "settings": {}, "metadata": {}, "deadline": 60}

An object takes ``message`` (required) plus the invocation fields ``context``,
``actor_id``, ``session_id``, ``settings``, ``metadata``, ``history``,
``deadline`` (seconds from the run's start) or ``deadline_at`` (ISO 8601),
and optionally ``id``, the item's id (a string or an integer; default: the
line number). Unknown fields are refused, so a typo such as ``"mesage"`` is
caught instead of silently dropped; ``run_id`` is refused because the batch
derives it from the item id.

Every line is checked the way ``Agent.start_execution`` would check it (the
invocation is built and the agent's model resolved), so a batch either starts
with every item valid or reports each bad line with its number.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lg_core.errors import InvocationError
from lg_core.invocation import Invocation

ITEM_FIELDS = (
    "message", "id", "context", "actor_id", "session_id", "settings", "metadata", "history", "deadline", "deadline_at", "rate_limit",
)
MAX_ITEM_ID = 200


@dataclass(frozen=True)
class BatchItem:
    """One valid input line: the message and the other invocation fields."""

    line: int
    id: str
    message: Any
    options: dict[str, Any]


@dataclass(frozen=True)
class InvalidLine:
    """A line that cannot become a run, with the reason a user can act on."""

    line: int
    id: str | None
    error_class: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass(frozen=True)
class BatchInputs:
    path: Path
    digest: str  # sha256 of the file's bytes
    items: list[BatchItem] = field(default_factory=list)
    invalid: list[InvalidLine] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.items) + len(self.invalid)


class BatchInputError(InvocationError):
    """The input file has invalid lines; ``problems`` lists them (nothing was submitted)."""

    problems: list[InvalidLine]


class _Invalid(Exception):
    def __init__(self, message: str, error_class: str = "InvocationError") -> None:
        super().__init__(message)
        self.error_class = error_class


def read_bytes(path: str | os.PathLike[str]) -> tuple[Path, bytes]:
    """The input file's content, or an InvocationError naming what is wrong with the path."""
    path = Path(path)
    if not path.exists():
        raise InvocationError(f"input file {path} does not exist")
    if path.is_dir():
        raise InvocationError(f"input file {path} is a directory; pass a JSONL file with one input per line")
    try:
        return path, path.read_bytes()
    except OSError as exc:
        raise InvocationError(f"cannot read input file {path}: {exc.strerror or exc}") from None


def read_inputs(path: str | os.PathLike[str], agent_cls: type, resolver: Any) -> BatchInputs:
    """Parse and validate every line of ``path`` for ``agent_cls`` (models resolved with ``resolver``)."""
    path, content = read_bytes(path)
    inputs = BatchInputs(path, hashlib.sha256(content).hexdigest())
    first_line_of: dict[str, tuple[int, bool]] = {}  # id -> its first line, and whether that line named it
    for number, raw in enumerate(content.split(b"\n"), start=1):
        if not raw.strip():
            continue
        item_id: str | None = None
        try:
            data = _decode(raw)
            item_id = _item_id(data, number)
            first = first_line_of.setdefault(item_id, (number, "id" in data))
            item = _item(number, item_id, data, agent_cls, resolver)  # the line's own mistakes first
            if first[0] != number:
                raise _Invalid(_duplicate(item_id, "id" in data, *first))
            inputs.items.append(item)
        except _Invalid as exc:
            inputs.invalid.append(InvalidLine(number, item_id, exc.error_class, str(exc)))
    if inputs.total == 0:
        raise InvocationError(f"input file {path} has no inputs: every line is blank (expected one JSON value per line)")
    return inputs


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Invalid("not UTF-8 text") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Invalid(f"not valid JSON ({exc.msg} at column {exc.colno}): {_preview(text)}") from None
    if isinstance(value, str):
        return {"message": value}
    if not isinstance(value, dict):
        raise _Invalid(
            f'expected a JSON string (the message) or an object with "message", got {_json_type(value)}'
        )
    return value


def _item_id(data: dict[str, Any], number: int) -> str:
    if "id" not in data:
        return str(number)
    value = data["id"]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value and len(value) <= MAX_ITEM_ID and value.isprintable():
        return value
    raise _Invalid(f"id must be a non-empty string (at most {MAX_ITEM_ID} printable characters) or an integer, got {_preview(json.dumps(value))}")


def _duplicate(item_id: str, named: bool, first_line: int, first_named: bool) -> str:
    """Why a line's id is taken, saying so when an id is a line number (a line without "id")."""
    if not named:
        return (f'this line has no "id", so its id is its line number, {item_id}, which line {first_line} '
                'already uses as its "id"; give this line an "id" of its own')
    if not first_named:
        return (f'id {item_id!r} is the id of line {first_line}, which has no "id" and so goes by its line number; '
                f'choose another id, or give line {first_line} an "id"')
    return f"id {item_id!r} is already used by line {first_line}"


def _item(number: int, item_id: str, data: dict[str, Any], agent_cls: type, resolver: Any) -> BatchItem:
    if "run_id" in data:
        raise _Invalid('"run_id" is not allowed: the batch derives each run id from the batch id and the item id (name items with "id")')
    unknown = sorted(set(data) - set(ITEM_FIELDS))
    if unknown:
        raise _Invalid(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; an input may have {', '.join(ITEM_FIELDS)}")
    if "message" not in data:
        raise _Invalid('missing "message"')
    options = {name: value for name, value in data.items() if name not in ("message", "id")}
    try:
        invocation = Invocation(data["message"], **options).check_storable()
    except InvocationError as exc:
        raise _Invalid(str(exc), type(exc).__name__) from None
    except (TypeError, ValueError) as exc:  # defensive: the normalizers raise InvocationError
        raise _Invalid(f"invalid invocation: {exc}") from None
    _check_model(agent_cls, invocation, resolver)
    return BatchItem(number, item_id, data["message"], options)


def _check_model(agent_cls: Any, invocation: Invocation, resolver: Any) -> None:
    """The item's model must resolve here, or its run would fail on a worker after the batch began."""
    try:
        resolver.resolve(agent_cls.select_model(invocation))
    except Exception as exc:  # noqa: BLE001 - select_model is application code; any failure makes the line invalid
        raise _Invalid(f"cannot resolve the agent's model: {exc}", type(exc).__name__) from None


def _json_type(value: Any) -> str:
    return {list: "an array", int: "a number", float: "a number", bool: "a boolean", type(None): "null"}.get(type(value), type(value).__name__)


def _preview(text: str, limit: int = 60) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


__all__ = ["BatchInputError", "BatchInputs", "BatchItem", "ITEM_FIELDS", "InvalidLine", "read_bytes", "read_inputs"]
