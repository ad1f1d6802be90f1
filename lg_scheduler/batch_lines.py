"""One line of a batch's input file: decoded, checked the way ``Agent.start_execution`` would
check it, its item id claimed against duplicates, and the messages about it bounded.

What a message quotes of a line's content is a short escaped excerpt (:func:`excerpt`),
and a message is cut to MAX_MESSAGE_CHARS, so neither the terminal nor the results file
receives a line's text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from lg_core.errors import InvocationError
from lg_core.invocation import Invocation

ITEM_FIELDS = (
    "message",
    "id",
    "context",
    "actor_id",
    "session_id",
    "settings",
    "metadata",
    "history",
    "deadline",
    "deadline_at",
    "rate_limit",
)
MAX_ITEM_ID = 200
MAX_MESSAGE_CHARS = 400  # an invalid line's message, content excerpts included
EXCERPT_CHARS = 80


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


class InvalidLineError(Exception):
    """Why a line cannot become a run (raised by the checks, kept as its InvalidLine)."""

    def __init__(self, message: str, error_class: str = "InvocationError") -> None:
        super().__init__(message)
        self.error_class = error_class


class IdClaims:
    """Which line first used each item id, for duplicates, without an entry per line.

    A line without "id" goes by its line number: those lines are one bit each
    (500,000 lines: 62 kB); only the ids a file gives are kept as strings.
    """

    def __init__(self) -> None:
        self._named: dict[str, int] = {}  # an id given by a line -> that line
        self._numbered = bytearray()  # bit n: line n has no "id", so it took the id str(n)

    def claim(self, item_id: str, number: int, named: bool) -> tuple[int, bool]:
        """The first line that used ``item_id``, and whether it named it; this line's if none did."""
        first = self._first(item_id, number)
        if first is not None:
            return first
        if named:
            self._named[item_id] = number
        else:
            if len(self._numbered) <= number >> 3:
                self._numbered.extend(bytes((number >> 3) + 1 - len(self._numbered)))
            self._numbered[number >> 3] |= 1 << (number & 7)
        return number, named

    def _first(self, item_id: str, number: int) -> tuple[int, bool] | None:
        claims = []
        if (line := self._named.get(item_id)) is not None:
            claims.append((line, True))
        if item_id.isascii() and item_id.isdigit() and not item_id.startswith("0"):
            line = int(item_id)
            if line < number and line >> 3 < len(self._numbered) and self._numbered[line >> 3] >> (line & 7) & 1:
                claims.append((line, False))
        return min(claims) if claims else None


def check_line(number: int, raw: bytes, ids: IdClaims, agent_cls: type, resolver: Any) -> InvalidLine | None:
    """None for a valid line; else why it is not (the line's own mistakes before a duplicate id)."""
    item_id: str | None = None
    try:
        data = decode_line(raw)
        item_id = _item_id(data, number)
        first = ids.claim(item_id, number, "id" in data)
        _validate(data, agent_cls, resolver)
        if first[0] != number:
            raise InvalidLineError(_duplicate(item_id, "id" in data, *first))
    except InvalidLineError as exc:
        return InvalidLine(number, item_id, exc.error_class, bounded_message(str(exc)))
    return None


def decode_line(raw: bytes) -> dict[str, Any]:
    """A line's value; a byte order mark starting it is dropped (Windows tools write one, ``cat`` keeps it)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidLineError("not UTF-8 text") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidLineError(f"not valid JSON ({exc.msg} at column {exc.colno}): {excerpt(text.strip())}") from None
    except RecursionError:  # json's decoder recurses once per level: [[[[...]]]] a million deep
        raise InvalidLineError(f"nested too deeply to decode: {excerpt(text.strip())}") from None
    if isinstance(value, str):
        return {"message": value}
    if not isinstance(value, dict):
        raise InvalidLineError(
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
    raise InvalidLineError(
        f"id must be a non-empty string (at most {MAX_ITEM_ID} printable characters) or an integer, "
        f"got {excerpt(json.dumps(value))}"
    )


def _duplicate(item_id: str, named: bool, first_line: int, first_named: bool) -> str:
    """Why a line's id is taken, saying so when an id is a line number (a line without "id")."""
    if not named:
        return (
            f'this line has no "id", so its id is its line number, {item_id}, which line {first_line} '
            'already uses as its "id"; give this line an "id" of its own'
        )
    if not first_named:
        return (
            f'id {item_id!r} is the id of line {first_line}, which has no "id" and so goes by its line number; '
            f'choose another id, or give line {first_line} an "id"'
        )
    return f"id {item_id!r} is already used by line {first_line}"


def _validate(data: dict[str, Any], agent_cls: type, resolver: Any) -> None:
    if "run_id" in data:
        raise InvalidLineError(
            '"run_id" is not allowed: the batch derives each run id from the batch id and the item id '
            '(name items with "id")'
        )
    unknown = sorted(set(data) - set(ITEM_FIELDS))
    if unknown:
        named = ", ".join(excerpt(name, 40) for name in unknown[:5]) + (
            f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        )
        raise InvalidLineError(
            f"unknown field{'s' if len(unknown) > 1 else ''} {named}; an input may have {', '.join(ITEM_FIELDS)}"
        )
    if "message" not in data:
        raise InvalidLineError('missing "message"')
    try:
        invocation = Invocation(data["message"], **_options(data)).check_storable()
    except InvocationError as exc:
        raise InvalidLineError(str(exc), type(exc).__name__) from None
    except (TypeError, ValueError) as exc:  # defensive: the normalizers raise InvocationError
        raise InvalidLineError(f"invalid invocation: {exc}") from None
    _check_model(agent_cls, invocation, resolver)


def _options(data: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in data.items() if name not in ("message", "id")}


def parsed_item(number: int, data: dict[str, Any]) -> BatchItem:
    """The item of a line the scan found valid."""
    return BatchItem(number, _item_id(data, number), data["message"], _options(data))


def _check_model(agent_cls: Any, invocation: Invocation, resolver: Any) -> None:
    """The item's model must resolve here, or its run would fail on a worker after the batch began."""
    try:
        resolver.resolve(agent_cls.select_model(invocation))
    except Exception as exc:  # noqa: BLE001 - select_model is application code; any failure makes the line invalid
        raise InvalidLineError(f"cannot resolve the agent's model: {exc}", type(exc).__name__) from None


def _json_type(value: Any) -> str:
    return {list: "an array", int: "a number", float: "a number", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``repr(text)``, cut to at most ``limit`` characters (ending in ``...``) without splitting an escape.

    What a message quotes of an input line: escaped, so a control character or a
    terminal escape sequence in the file reaches neither the terminal nor the results.
    """
    quoted = repr(text)
    if len(quoted) <= limit:
        return quoted
    shortest, longest = 0, min(len(text), limit)  # the longest prefix whose repr fits, by bisection
    while shortest < longest:
        middle = (shortest + longest + 1) // 2
        if len(repr(text[:middle])) + 3 <= limit:
            shortest = middle
        else:
            longest = middle - 1
    return repr(text[:shortest]) + "..."


# A quoted value (repr's quotes follow no letter, an apostrophe does); a long one may have been cut open.
_QUOTED = re.compile(r"(?<!\w)(?:'(?:[^'\\]|\\.)*(?:'|$)|\"(?:[^\"\\]|\\.)*(?:\"|$))")
_CUT_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]?|u[0-9a-fA-F]{0,3}|U[0-9a-fA-F]{0,7})?$")


def bounded_message(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` with control characters escaped, each quoted value cut to an excerpt, and at most
    ``limit`` long.

    The checks' own messages quote content through :func:`excerpt`; this bounds
    the ones that quote it otherwise (an invocation field's value, as in
    ``actor_id must be ..., got '...'``, or an exception raised by the
    application's select_model).
    """
    safe = "".join(char if char.isprintable() else repr(char)[1:-1] for char in message[: limit * 8])
    safe = _QUOTED.sub(_shortened_quote, safe)
    return safe if len(safe) <= limit else safe[: limit - 3] + "..."


def _shortened_quote(match: re.Match[str]) -> str:
    quoted = match.group(0)
    if len(quoted) <= EXCERPT_CHARS:
        return quoted
    return _CUT_ESCAPE.sub("", quoted[: EXCERPT_CHARS - 4]) + quoted[0] + "..."


__all__ = [
    "EXCERPT_CHARS",
    "IdClaims",
    "ITEM_FIELDS",
    "MAX_ITEM_ID",
    "MAX_MESSAGE_CHARS",
    "BatchItem",
    "InvalidLine",
    "InvalidLineError",
    "bounded_message",
    "check_line",
    "decode_line",
    "excerpt",
    "parsed_item",
]
