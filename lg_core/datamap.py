"""DataMap: JSON-compatible application data with indifferent key access.

Ruby's DataMap lets String and Symbol keys address the same value. Python has
no symbols, but applications still pass enum members, ``str`` subclasses and
other key types; DataMap normalizes every key to a plain ``str`` so a value
stored under ``Key.ACCOUNT`` is read back as ``"account"`` after a trip
through the run store. Values must be JSON-compatible because the run store
persists them; anything else is rejected when it is stored, not later when a
checkpoint is written.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from types import MappingProxyType
from typing import Any, cast

_SCALARS = (str, int, float, bool, type(None))
# How deep a stored value may nest. Python recurses to copy, wrap and encode a value
# (DataMap about five frames per level, pydantic-core's encoder stops at 255), so
# a value nested a few hundred levels deep failed far from where it came in, with
# RecursionError or a failed commit. No real context, state or tool input comes close.
MAX_JSON_DEPTH = 100
_MISSING = object()


def deep_freeze(value: Any) -> Any:
    """A read-only copy: mappings become mapping proxies, lists tuples, sets frozensets."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: deep_freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(deep_freeze(item) for item in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(deep_freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """A plain, mutable JSON-shaped copy of a deeply frozen value (mapping proxies, tuples)."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(item) for item in value]
    return value


def normalize_key(key: Any) -> str:
    """The canonical string form of a key: a string, an enum member's value, or a number or bool as JSON writes it."""
    if isinstance(key, enum.Enum):
        key = key.value
    if isinstance(key, str):
        return str(key)
    if isinstance(key, bool):  # as JSON writes it ("true"), not as str() does ("True")
        return "true" if key else "false"
    if isinstance(key, (int, float)):
        return str(key)
    raise TypeError(f"DataMap keys must be strings, got {type(key).__name__}: {key!r}")


def canonical_items(mapping: Mapping[Any, Any], *, path: str = "value") -> list[tuple[str, Any]]:
    """``mapping``'s items under their canonical string keys.

    Two keys with one canonical form (``Key.ACCOUNT`` and ``"account"``, ``1`` and
    ``"1"``) are ambiguous, as the spec's String and Symbol forms of one key are:
    ValueError (the spec's ArgumentError) instead of silently keeping the last value.
    """
    seen: dict[str, Any] = {}
    items = []
    for key, value in mapping.items():
        name = normalize_key(key)
        if name in seen:
            raise ValueError(
                f"{path} has the keys {seen[name]!r} and {key!r}, both the key {name!r}: "
                "ambiguous; keep only one of them"
            )
        seen[name] = key
        items.append((name, value))
    return items


def nests_deeper_than(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Does ``value`` hold mappings or lists more than ``limit`` levels deep? (Without recursing.)"""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


def to_json_value(value: Any, *, path: str = "value") -> Any:
    """Copy ``value`` into plain JSON types; TypeError naming where (``path`` onwards) it is not JSON.

    A DataMap's contents are copied and checked like any other mapping, not
    trusted: its values were checked when they were stored, but the lists and
    mappings among them are ordinary containers, so ``state["items"].append(
    {"when": object()})`` reaches one unchecked, and only a copy made where the
    value is persisted finds it. The place (``context.state.items[0].when``) is
    worked out only on failure, so an all-JSON value costs one copy. Two keys of
    one canonical form are a ValueError (:func:`canonical_items`).
    """
    try:
        return _json_copy(value, 0)
    except _NotJson as bad:
        where = path + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in reversed(bad.path))
        if bad.too_deep and len(where) > 60:
            where = f"{where[:60]}..."
        raise bad.error(f"{where} {bad.problem}") from None


class _NotJson(Exception):
    """Raised inside :func:`to_json_value` at a value JSON cannot hold; ``path`` grows as it unwinds."""

    def __init__(self, problem: str, error: type[Exception] = TypeError, *, too_deep: bool = False) -> None:
        super().__init__(problem)
        self.problem, self.error, self.too_deep = problem, error, too_deep
        self.path: list[str | int] = []  # keys and indexes, innermost first


def _json_copy(value: Any, depth: int) -> Any:
    if depth > MAX_JSON_DEPTH:
        raise _NotJson(
            f"nests more than {MAX_JSON_DEPTH} levels deep; stored values may nest at most {MAX_JSON_DEPTH}",
            too_deep=True,
        )
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, _SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            raise _NotJson(f"is {value!r}, which JSON cannot represent")
        return value
    if isinstance(value, DataMap):
        return {key: _json_child(item, key, depth) for key, item in value._data.items()}
    if isinstance(value, Mapping):
        try:
            items = canonical_items(value, path="")
        except ValueError as exc:  # two keys of one canonical form
            raise _NotJson(str(exc).strip(), ValueError) from None
        return {key: _json_child(item, key, depth) for key, item in items}
    if isinstance(value, (list, tuple)):
        return [_json_child(item, index, depth) for index, item in enumerate(value)]
    raise _NotJson(
        f"is a {kind.__name__}; only JSON-compatible values "
        "(str, int, float, bool, None, lists and mappings) can be stored"
    )


def _json_child(value: Any, key: str | int, depth: int) -> Any:
    try:
        return _json_copy(value, depth + 1)
    except _NotJson as bad:
        bad.path.append(key)
        raise


class _StringKeyed:
    """Reads by key for the DataMap classes: a key is looked up by its canonical string
    (an enum member by its value), and a key that can be none is simply absent."""

    __slots__ = ()
    _data: dict[str, Any]

    def __getitem__(self, key: Any) -> Any:
        return self._data[normalize_key(key)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        try:
            return normalize_key(key) in self._data
        except TypeError:
            return False


class DataMap(_StringKeyed, MutableMapping[str, Any]):
    """A mutable mapping with string keys and JSON-compatible values.

    Nested mappings become DataMaps too, so ``state["plan"]["status"]`` and
    ``state.dig("plan", "status")`` agree.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[Any, Any] | None = None, /, **values: Any) -> None:
        if data is not None and not isinstance(data, Mapping):
            raise TypeError(f"DataMap needs a mapping such as {{'plan': 'draft'}}, got {_described(data)}")
        self._data: dict[str, Any] = {}
        for source in (data or {}), values:
            self.update(source)

    @classmethod
    def coerce(cls, value: Any) -> DataMap:
        """``value`` itself when it is already a DataMap, else a DataMap of the mapping."""
        if isinstance(value, DataMap):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"DataMap.coerce needs a mapping, got {type(value).__name__}")
        return cls(value)

    def merge(self, other: Mapping[Any, Any]) -> DataMap:
        """A normalized copy of this map with ``other``'s items stored over it."""
        merged = self.copy()
        merged.update(other)
        return merged

    def __or__(self, other: Any) -> DataMap:
        if not isinstance(other, Mapping):
            return NotImplemented
        return self.merge(other)

    def __ior__(self, other: Any) -> DataMap:
        if not isinstance(other, Mapping):
            return NotImplemented
        self.update(other)
        return self

    @staticmethod
    def _wrap(value: Any) -> Any:
        if isinstance(value, DataMap):
            return value
        if isinstance(value, enum.Enum):
            return DataMap._wrap(value.value)
        if isinstance(value, Mapping):
            return DataMap(value)
        if isinstance(value, (list, tuple)):
            return [DataMap._wrap(v) for v in value]
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        name = normalize_key(key)
        to_json_value(value, path=name)
        self._data[name] = self._wrap(value)

    def __delitem__(self, key: Any) -> None:
        del self._data[normalize_key(key)]

    def __repr__(self) -> str:
        return f"DataMap({self.to_dict()!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DataMap):
            return self.to_dict() == other.to_dict()
        if isinstance(other, Mapping):
            try:
                return bool(self.to_dict() == to_json_value(other))
            except TypeError:
                return False
        return NotImplemented

    def update(self, other: Any = (), /, **values: Any) -> None:
        """Store every item of ``other`` (a mapping or key-value pairs), then of ``values``.

        A mapping naming one key twice (``Key.ACCOUNT`` and ``"account"``) raises
        ValueError, as the constructor does.
        """
        for source in other, values:
            items = canonical_items(source, path="DataMap") if isinstance(source, Mapping) else _pairs(source)
            for key, value in items:
                self[key] = value

    def fetch(self, key: Any, default: Any = _MISSING) -> Any:
        """Like ``self[key]``, but a missing key names the available keys."""
        try:
            return self[key]
        except KeyError:
            if default is not _MISSING:
                return default
            raise KeyError(f"key not found: {key!r}; available keys: {sorted(self._data)}") from None

    def dig(self, key: Any, *names: Any) -> Any:
        """Walk nested maps and lists; returns None when any step is missing."""
        current: Any = self.get(key)
        for name in names:
            if isinstance(current, DataMap):
                current = current.get(name)
            elif isinstance(current, list) and isinstance(name, int):
                current = current[name] if -len(current) <= name < len(current) else None
            else:
                return None
        return current

    def to_dict(self) -> dict[str, Any]:
        """A deep copy in plain JSON types."""
        return {k: _plain(v) for k, v in self._data.items()}

    def copy(self) -> DataMap:
        """A deep independent copy (the spec's ``initialize_copy``)."""
        return DataMap(self.to_dict())

    # copy.copy would otherwise share the slot's dict, so a copy's writes reached the original.
    __copy__ = copy

    def __deepcopy__(self, memo: dict[int, Any]) -> DataMap:
        return self.copy()


class FrozenDataMap(_StringKeyed, Mapping[str, Any]):
    """A read-only DataMap: string keys (an enum member reads as its value), deeply frozen JSON values.

    What a frozen object (a Message) holds: nested mappings are FrozenDataMaps and
    lists are tuples, so nothing reachable from it can be changed, and a message's
    cached serialized form cannot go stale. :meth:`to_dict` gives a plain copy.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[Any, Any] | None = None, /, *, path: str = "value") -> None:
        if data is not None and not isinstance(data, Mapping):
            raise TypeError(f"{path} must be a mapping such as {{'channel': 'web'}}, got {_described(data)}")
        plain = to_json_value(dict(data or {}), path=path)
        self._data: dict[str, Any] = {key: _frozen(value) for key, value in plain.items()}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            try:
                return bool(self.to_dict() == to_json_value(other))
            except (TypeError, ValueError):
                return False
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to plain dicts, which are not hashable

    def __repr__(self) -> str:
        return f"FrozenDataMap({self.to_dict()!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDataMap, (self.to_dict(),))

    def to_dict(self) -> dict[str, Any]:
        """A plain, mutable copy (dicts and lists)."""
        return cast(dict[str, Any], thaw(self._data))


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        frozen = FrozenDataMap.__new__(FrozenDataMap)
        frozen._data = {key: _frozen(item) for key, item in value.items()}
        return frozen
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    return value


def _pairs(source: Any) -> list[tuple[Any, Any]]:
    """The (key, value) pairs of ``source``, which ``update`` takes as ``dict.update`` does;
    TypeError saying so when it is not a mapping or an iterable of pairs."""
    items = list(source) if isinstance(source, Iterable) and not isinstance(source, (str, bytes)) else None
    if items is None or not all(isinstance(item, (list, tuple)) and len(item) == 2 for item in items):
        raise TypeError(f"DataMap.update needs a mapping or (key, value) pairs, got {_described(source)}")
    return items


def _described(value: Any) -> str:
    """``value``'s type and a short repr, for an error about a wrong argument."""
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:40] + '...'}"


def _plain(value: Any) -> Any:
    if isinstance(value, DataMap):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
