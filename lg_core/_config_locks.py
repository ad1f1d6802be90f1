"""The locked settings of a running configuration: its mappings and lists, copied so that a
change raises as assigning a setting does, instead of being silently lost on a runtime that
already read them (``Configuration.runtime`` locks them, ``close`` unlocks them)."""

from __future__ import annotations

from typing import Any, cast

from lg_core.errors import ConfigurationError


def locked_message(change: str) -> str:
    return (
        f"the configuration is locked because its runtime is running; {change} before the first "
        "agent call, or use with_configuration(Configuration(...)) for an independent setup"
    )


class _LockedDict(dict):  # type: ignore[type-arg]
    """A mapping setting of a locked configuration: reads as a dict, refuses changes."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise ConfigurationError(locked_message("change providers, models and the other mapping settings"))

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> Any:  # copies and pickles are ordinary, editable dicts
        return (dict, (unlocked(self),))

    def __copy__(self) -> dict[Any, Any]:
        return cast(dict[Any, Any], unlocked(self))

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        import copy

        return copy.deepcopy(unlocked(self), memo)


class _LockedList(list):  # type: ignore[type-arg]
    """A list setting (imports, hooks) of a locked configuration: reads as a list, refuses changes."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise ConfigurationError(locked_message("change imports and hooks"))

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse  # type: ignore[assignment]
    append = extend = insert = remove = pop = clear = sort = reverse = _refuse

    def __reduce__(self) -> Any:
        return (list, (unlocked(self),))

    def __copy__(self) -> list[Any]:
        return cast(list[Any], unlocked(self))

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        import copy

        return copy.deepcopy(unlocked(self), memo)


def locked(value: Any) -> Any:
    """``value`` with its dicts and lists, at any depth, made locked copies."""
    if isinstance(value, dict):
        return _LockedDict({key: locked(item) for key, item in value.items()})
    if isinstance(value, list):
        return _LockedList(locked(item) for item in value)
    return value


def unlocked(value: Any) -> Any:
    """``value`` with its dicts and lists, at any depth, made plain editable copies."""
    if isinstance(value, dict):
        return {key: unlocked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unlocked(item) for item in value]
    return value


__all__ = ["locked", "locked_message", "unlocked"]
