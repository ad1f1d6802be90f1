"""Invocation: one application request in LittleGhost's standard shape.

Known fields are normalized here, once, at the public entrypoint, so every bad
input fails with an :class:`InvocationError` before a Run exists and nothing
half-built reaches the run store. Unknown keyword fields stay available
through ``invocation["name"]`` and ``invocation.name`` (the spec's
"indifferent-key environment"), but must be JSON-compatible because the
invocation is persisted with the run. Every field, known or not, is written
with ``invocation["name"] = value`` or ``invocation.name = value``; both
normalize and validate the value the way the constructor does.

One field waits: ``deadline_at`` given as ISO 8601 text is kept as text and
parsed when it is first read (the spec: "parsing is deferred until
``deadline_at`` is read"), so unparsable text raises its InvocationError
there. Starting a run reads it (:meth:`Invocation.check_storable`), so such a
request still fails before its Run exists.
"""

from __future__ import annotations

import copy
import json
import math
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from pydantic import ValidationError

from lg_core.datamap import DataMap, canonical_items, normalize_key, to_json_value
from lg_core.errors import InvocationError, UnsupportedInputError
from lg_core.messages import Message
from lg_core.rate_limit import RateLimit
from lg_core.run_ids import ID_PATTERN, ID_RULE

KNOWN_FIELDS = (
    "message",
    "history",
    "context",
    "actor_id",
    "session_id",
    "run_id",
    "invocation_id",
    "settings",
    "deadline_at",
    "metadata",
    "model_override",
    "rate_limit",
    "include_agent_events",
)
_MISSING = object()
# Options of the spec's ask that are objects living in the caller's process; an unknown field would
# otherwise be stored and ignored.
_RUN_RESOURCES = ("workspace", "sandbox")


def new_id() -> str:
    """A new run id: a UUIDv7 (RFC 9562) in hex, so ids sort by creation time.

    Why time-ordered: every store table is keyed by run id first, so a random
    id puts each new run's rows in the middle of every B-tree, where inserts
    split and rebalance full pages; ids that grow with time keep the rows of
    the runs in flight together at the end. The 74 random bits keep ids
    unguessable and unique across processes.
    """
    milliseconds = time.time_ns() // 1_000_000
    value = (milliseconds & 0xFFFF_FFFF_FFFF) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 9562 variant
    return f"{value:032x}"


class Invocation:
    """The normalized request carried by a Run."""

    __slots__ = ("_env",)
    _env: dict[str, Any]

    def __init__(self, message: Any = _MISSING, /, **env: Any) -> None:
        if message is not _MISSING:
            if "message" in env:
                raise InvocationError("pass the message either positionally or as message=, not both")
            env["message"] = message
        if "deadline" in env:
            if "deadline_at" in env:
                raise InvocationError("pass either deadline= or deadline_at=, not both")
            env["deadline_at"] = _relative_deadline(env.pop("deadline"))
        normalized: dict[str, Any] = {}
        _normalize_into(normalized, env)
        object.__setattr__(self, "_env", normalized)

    # -- construction helpers -------------------------------------------------

    @classmethod
    def coerce(cls, value: Any, **options: Any) -> Invocation:
        """Build from a message plus options, a mapping, or an Invocation."""
        if isinstance(value, Invocation):
            if options:
                data = value.to_dict()
                override = data.pop("model_override", None)  # the invocation's own (a fork's), kept
                data.update(options)
                return cls.from_dict(data)._overriding_model(override)
            return value
        return cls(value, **options)

    @classmethod
    def restore(cls, data: Mapping[str, Any]) -> Invocation:
        """An invocation as the run store recorded it, a fork's ``model_override`` included.

        Only for the store's own records: caller input goes through the constructor or
        :meth:`from_dict`, which refuse ``model_override`` (see :func:`_normalize_into`).
        """
        fields = dict(data)
        override = fields.pop("model_override", None)
        return cls.from_dict(fields)._overriding_model(override)

    def _overriding_model(self, override: Any) -> Invocation:
        if override is not None:
            self._env["model_override"] = _model_override(override, "model_override")
        return self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Invocation:
        """The invocation of a whole environment: ``{"message": ..., "account_id": ...}``."""
        if not isinstance(data, Mapping):
            raise InvocationError(
                f"an invocation payload must be a mapping of fields such as {{'message': ...}}, "
                f"got {type(data).__name__}"
            )
        try:
            items = canonical_items(data, path="invocation")
        except (TypeError, ValueError) as exc:
            raise InvocationError(f"invalid invocation key: {exc}") from None
        # message/history dicts (with or without "v") are read by the field
        # normalizers, which turn bad records into InvocationError.
        return cls(**dict(items))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe copy of the whole environment."""
        return copy.deepcopy(self._plain_form())

    def _plain_form(self) -> dict[str, Any]:
        """The environment in plain types, sharing its inner containers (``to_dict`` copies them)."""
        data = dict(self._env)
        data["message"] = self.message.to_dict()
        data["history"] = [m.to_dict() for m in self.history]
        data["context"] = self.context.to_dict()
        deadline = data.get("deadline_at")
        if isinstance(deadline, datetime):  # text not read yet stays as it was given
            data["deadline_at"] = deadline.isoformat()
        return data

    # -- indifferent access ---------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        return self._env[_key(key)]

    def __setitem__(self, key: Any, value: Any) -> None:
        name = _key(key)
        if name == "deadline":  # the constructor's relative form, so it is not stored as an unknown field
            name, value = "deadline_at", _relative_deadline(value)
        _normalize_into(self._env, {name: value}, partial=True)

    def __setattr__(self, name: str, value: Any) -> None:
        """``invocation.actor_id = ...`` (and ``invocation.account_id = ...`` for an application
        field) is ``invocation["actor_id"] = ...``: the spec's writers and "dynamic ... writers"
        normalize and validate like item assignment, raising InvocationError for a bad value.

        Names beginning with ``_`` and method names are refused: the first would reach
        the internals, and a field named like a method (``get``) could be written
        but never read back as an attribute; use ``invocation["get"]`` for those.
        """
        if name.startswith("_") or (hasattr(type(self), name) and name not in _WRITABLE_ATTRIBUTES):
            raise AttributeError(
                f"Invocation attribute {name!r} cannot be assigned; "
                f"use invocation[{name!r}] = ... for a field of that name"
            )
        self[name] = value

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Invocation fields cannot be deleted ({name!r}); assign a new value instead")

    def __getstate__(self) -> dict[str, Any]:
        return dict(self._env)  # a copy's writers must not change the original's fields

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Copy and pickle restore the already-normalized environment (``__setattr__`` refuses ``_env``)."""
        object.__setattr__(self, "_env", state)

    def __contains__(self, key: Any) -> bool:
        try:
            return normalize_key(key) in self._env
        except TypeError:
            return False  # no field has a key of that type

    def __getattr__(self, name: str) -> Any:
        env = object.__getattribute__(self, "_env")
        if name in env:
            return env[name]
        raise AttributeError(f"Invocation has no field {name!r}")

    def get(self, key: Any, default: Any = None) -> Any:
        return self._env.get(_key(key), default)

    def fetch(self, key: Any, default: Any = _MISSING) -> Any:
        name = _key(key)
        if name in self._env:
            return self._env[name]
        if default is not _MISSING:
            return default
        raise KeyError(f"invocation has no field {name!r}")

    def key(self, key: Any) -> bool:
        return key in self

    def dig(self, key: Any, *names: Any) -> Any:
        """Walk nested mappings by key and lists by integer index (the spec's Hash#dig,
        as ``DataMap.dig`` does); None when any step is missing."""
        value = self.get(key)
        for name in names:
            if isinstance(value, Mapping):
                value = value.get(name)
            elif isinstance(value, (list, tuple)) and isinstance(name, int) and not isinstance(name, bool):
                value = value[name] if -len(value) <= name < len(value) else None
            else:
                return None
        return value

    # -- typed fields -----------------------------------------------------------

    @property
    def message(self) -> Message:
        return cast("Message", self._env["message"])

    @property
    def history(self) -> tuple[Message, ...]:
        return cast("tuple[Message, ...]", self._env["history"])

    @property
    def context(self) -> DataMap:
        return cast("DataMap", self._env["context"])

    @property
    def actor_id(self) -> str | None:
        return cast("str | None", self._env.get("actor_id"))

    @property
    def session_id(self) -> str:
        return cast("str", self._env["session_id"])

    @property
    def run_id(self) -> str:
        return cast("str", self._env["run_id"])

    @property
    def invocation_id(self) -> str:
        return cast("str", self._env["invocation_id"])

    @property
    def settings(self) -> dict[str, Any]:
        return cast("dict[str, Any]", self._env["settings"])

    @property
    def deadline_at(self) -> datetime | None:
        """The deadline, in UTC. ISO 8601 text is parsed here, the first time it is read (the spec's
        lazy parse), and kept parsed; text that is not ISO 8601 raises InvocationError here, not when
        it was given. A run reads it before it exists (``check_storable``), so a bad deadline still
        fails the request and never a stored run."""
        value = self._env.get("deadline_at")
        if isinstance(value, str):
            value = self._env["deadline_at"] = _parsed_deadline(value)
        return value

    @property
    def metadata(self) -> dict[str, Any]:
        return cast("dict[str, Any]", self._env["metadata"])

    @property
    def model_override(self) -> str | dict[str, Any] | None:
        """A model role, target or mapping used instead of the agent's own (``lg_core.fork(..., model=)``)."""
        return cast("dict[str, Any]", self._env.get("model_override"))

    @property
    def rate_limit(self) -> RateLimit | None:
        """The pace of this run's model calls on its provider connection (see lg_core.rate_limit)."""
        text = self._env.get("rate_limit")
        return None if text is None else RateLimit.parse(text)

    def check_storable(self) -> Invocation:
        """InvocationError unless the whole invocation can be stored, as JSON in UTF-8.

        Every field was checked when it was set, but the mappings and lists inside
        some are mutable (``settings``, ``metadata``, a list in ``context``, a
        message's ``metadata``): a value put in one afterwards is found here, named
        by its place (``settings['sent_at']``). And a lone surrogate such as
        ``"\\ud800"`` passes Python's str but no database, JSON writer or provider takes it.
        """
        _ = self.deadline_at  # parsed now: a run stores its deadline, so bad text fails the request here
        plain = self._json_form()
        try:
            json.dumps(plain, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = exc.object[exc.start : exc.end].encode("unicode_escape").decode()
            raise InvocationError(
                f"the invocation holds text that is not valid Unicode ({bad!r}, a lone surrogate); "
                "fix or drop that character before starting the run"
            ) from None
        return self

    def _json_form(self) -> dict[str, Any]:
        """The environment as plain JSON; InvocationError naming the first value that is not JSON."""
        form = {}
        for name, value in self._plain_form().items():
            try:
                form[name] = to_json_value(value, path=name)
            except (TypeError, ValueError) as exc:
                raise InvocationError(
                    f"the invocation cannot be stored: {exc}. A value put into a field's mappings or lists "
                    "after the field was set is checked only here; store a JSON form of it instead"
                ) from None
        return form

    def __repr__(self) -> str:
        return f"Invocation(run_id={self.run_id!r}, message={self.message.text[:40]!r})"


# -- normalization ------------------------------------------------------------


_GENERATED = ("run_id", "session_id", "invocation_id")
# Fields with a named reader on Invocation that may also be assigned as attributes.
_WRITABLE_ATTRIBUTES = frozenset(KNOWN_FIELDS)


def _key(key: Any) -> str:
    """The field name of ``key`` (a string, an enum member of one); InvocationError for anything else."""
    try:
        return normalize_key(key)
    except TypeError:
        raise InvocationError(
            f"invalid invocation key {key!r} ({type(key).__name__}): field names are strings"
        ) from None


def _normalize_into(env: dict[str, Any], values: Mapping[str, Any], partial: bool = False) -> None:
    for key, value in values.items():
        name = normalize_key(key)
        if value is None and name in _GENERATED and not partial:
            continue  # None means "generate it", as when the id is missing
        if name == "model_override" and not partial:
            # Not a field a caller may pass: an app forwarding request fields (ask(**payload))
            # would let its client replace the model select_model chose. Forks set it
            # through Invocation.restore.
            raise InvocationError(
                "model_override is not an invocation field a caller can pass: lg_core.fork(run_id, model=...) "
                "records it for a fork; to choose a model per request, define select_model on the agent"
            )
        if name in _RUN_RESOURCES:
            raise InvocationError(
                f"{name}= names the spec's caller-owned {name.capitalize()}, which a run here does not take: "
                f"a step may run on any worker, so the run's {name} is built from the {name} setting "
                f"(configure({name}=...) or lg.yaml) for every step"
            )
        normalizer = _NORMALIZERS.get(name, _extra_field)
        env[name] = normalizer(value, name)
    if partial:
        return
    if "message" not in env:
        raise InvocationError("an invocation needs a message: ask('your question', ...)")
    env.setdefault("history", ())
    env.setdefault("context", DataMap())
    env.setdefault("settings", {})
    env.setdefault("metadata", {})
    env.setdefault("run_id", new_id())
    env.setdefault("invocation_id", env["run_id"])
    env.setdefault("session_id", env["run_id"])


def _message(value: Any, name: str) -> Message:
    if value is None:
        raise InvocationError("message must not be None; pass the user's text or a Message")
    if isinstance(value, Mapping) and "message" in value and "role" not in value:
        raise InvocationError(
            f"the message is a mapping of invocation fields ({sorted(map(str, value))}), not a message; "
            "pass the fields as keywords, Invocation(**fields) or ask(**fields), or build it with "
            "Invocation.from_dict(fields)"
        )
    try:
        message = Message.coerce(value)
    except (ValidationError, TypeError, ValueError) as exc:
        raise UnsupportedInputError(f"message could not be read as a Message: {brief_error(exc)}") from None
    if message.role != "user":
        raise InvocationError(f"the invocation message must have role 'user', got {message.role!r}")
    if not message.content or (
        all(getattr(b, "kind", "") == "text" for b in message.content) and not message.text.strip()
    ):
        raise InvocationError("message must not be blank")
    return message


def _history(value: Any, name: str) -> tuple[Message, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise InvocationError("history must be a list of messages")
    messages = []
    for index, item in enumerate(value):
        try:
            message = Message.coerce(item)
        except (ValidationError, TypeError, ValueError) as exc:
            raise InvocationError(f"history[{index}] is not a valid message: {brief_error(exc)}") from None
        if message.role == "system":
            raise InvocationError(
                f"history[{index}] is a system message; the agent's system_prompt supplies system text"
            )
        messages.append(message)
    return tuple(messages)


def _json_mapping(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvocationError(f"{name} must be a mapping, got {type(value).__name__}")
    try:
        return cast(dict[str, Any], to_json_value(value, path=name))
    except (TypeError, ValueError) as exc:
        raise InvocationError(str(exc)) from None


def _context(value: Any, name: str) -> DataMap:
    return DataMap(_json_mapping(value, name))


def _identifier(value: Any, name: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise InvocationError(f"{name} must be {ID_RULE}, got {value!r}")
    return value


def _actor(value: Any, name: str) -> str | None:
    return None if value is None else _identifier(value, name)


def _deadline(value: Any, name: str) -> datetime | str | None:
    """A datetime in UTC; text is kept as given, parsed when ``deadline_at`` is read (the spec's
    "parsing is deferred until deadline_at is read"). A value of another type is refused now."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, datetime):
        raise InvocationError(f"deadline_at must be a datetime or ISO 8601 text, got {type(value).__name__}")
    return _in_utc(value)


def _parsed_deadline(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvocationError(f"deadline_at {text!r} is not ISO 8601 text") from None
    return _in_utc(value)


def _in_utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive datetime is read as local time."""
    if value.tzinfo is None:
        value = value.astimezone()
    return value.astimezone(UTC)


def _relative_deadline(value: Any) -> Any:
    if isinstance(value, str):  # else it would fail later as a bad deadline_at, naming the wrong field
        raise InvocationError(
            f"deadline is a number of seconds from now (or a datetime), got the text {value!r}; "
            "give ISO 8601 text as deadline_at"
        )
    if value is None or isinstance(value, datetime):
        return value  # no deadline, or an absolute one: deadline_at's own rules apply
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise InvocationError(
            f"deadline must be a number of seconds from now, a timedelta or a datetime, got {type(value).__name__}"
        )
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvocationError(f"deadline must be a non-negative number of seconds, got {value!r}")
    try:
        return datetime.now(UTC) + timedelta(seconds=seconds)
    except OverflowError:
        raise InvocationError(f"deadline {value!r} seconds is too far in the future") from None


def _model_override(value: Any, name: str) -> str | dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip() and not value.startswith(":") and not value.endswith(":"):
        return value
    if isinstance(value, Mapping) and value.get("provider") and value.get("model"):
        return _json_mapping(value, name)
    raise InvocationError(
        f"{name} must be a model role, a 'connection:model-id' target "
        f"or {{'provider': ..., 'model': ...}}, got {value!r}"
    )


def _rate_limit(value: Any, name: str) -> str | None:
    """Stored as its canonical text, so the persisted invocation stays JSON."""
    return None if value is None else str(RateLimit.parse(value))


def _include_agent_events(value: Any, name: str) -> bool | None:
    """None (not given) leaves the choice to the entrypoint: on for a composite assembly, off for
    a standalone Agent (Run.include_agent_events)."""
    if value is not None and not isinstance(value, bool):
        raise InvocationError(f"include_agent_events must be true or false, got {value!r}")
    return value


def _extra_field(value: Any, name: str) -> Any:
    try:
        return cast(dict[str, Any], to_json_value(value, path=name))
    except (TypeError, ValueError) as exc:
        raise InvocationError(str(exc)) from None


def brief_error(exc: BaseException) -> str:
    """One line for a refused value: a Pydantic error's first problem and where, else the message."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    return str(exc)


_NORMALIZERS: dict[str, Callable[[Any, str], Any]] = {
    "message": _message,
    "history": _history,
    "context": _context,
    "actor_id": _actor,
    "session_id": _identifier,
    "run_id": _identifier,
    "invocation_id": _identifier,
    "settings": _json_mapping,
    "metadata": _json_mapping,
    "deadline_at": _deadline,
    "model_override": _model_override,
    "rate_limit": _rate_limit,
    "include_agent_events": _include_agent_events,
}

__all__ = ["Invocation", "KNOWN_FIELDS", "brief_error", "new_id"]
