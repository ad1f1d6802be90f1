"""The names and checks of a Tool class's declarations, applied when the class is defined.

A tool's name is what the model calls it by, so a class without ``tool_name`` gets one
from its class name, held to the rule a declared one meets; a ``call`` of the wrong
shape, or a class attribute hiding a run-scoped binding, fails at import instead of
in every call.
"""

from __future__ import annotations

import inspect
import re
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lg_core.errors import ConfigurationError

if TYPE_CHECKING:
    from lg_core.tool import Tool


NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def takes_arguments(function: Callable[..., Any], count: int) -> bool:
    """Whether ``function`` can be called with ``count`` positional arguments (True when unknowable)."""
    try:
        inspect.signature(function).bind(*([None] * count))
    except TypeError:
        return False
    except ValueError:  # a builtin without a signature
        return True
    return True


def check_call(cls: type, call: Any) -> None:
    """``call`` must take the input: a wrong signature would fail every call, reported to the model."""
    if isinstance(call, staticmethod):
        function, count = call.__func__, 1
    elif isinstance(call, classmethod):
        function, count = call.__func__, 2
    else:
        function, count = call, 2
    if not callable(function) or not takes_arguments(function, count):
        raise ConfigurationError(
            f"{cls.__qualname__}.call must be a method taking the input, `def call(self, input)`, got {call!r}"
        )


# What a tool reads from its run-scoped Binding (Tool.agent ... Tool.idempotency_key).
_BINDING_ACCESSORS = ("agent", "run", "runtime", "model", "workspace", "sandbox", "idempotency_key")
# Run-scoped objects built from settings: a class attribute would read as a per-tool declaration
# (``sandbox = {"network": "none"}``) that nothing enforces.
_FROM_SETTINGS = ("sandbox", "workspace")


def refuse_shadowed_bindings(cls: type[Tool]) -> None:
    """A class attribute named like a binding accessor fails at class definition.

    It would replace the accessor, so the tool would read its own value instead of
    the run's. For ``sandbox`` and ``workspace`` it reads as a per-tool declaration
    (``sandbox = {"network": "none"}``) that nothing enforces: a tool's sandbox is the
    run's, built from the ``sandbox`` setting, and the tool would run with whatever
    that grants. A property (an accessor written on purpose) is left alone.
    """
    for name in _BINDING_ACCESSORS:
        if name not in vars(cls) or isinstance(vars(cls)[name], property):
            continue
        if name in _FROM_SETTINGS:
            raise ConfigurationError(
                f"{cls.__qualname__} declares {name} = ..., but a tool's {name} is its run's, built from the {name} "
                f"setting (configure({name}=...) or lg.yaml); nothing would enforce a per-tool one. Remove the "
                f"declaration; narrow the run's sandbox inside call() with self.sandbox.scope(...) if it needs less"
            )
        raise ConfigurationError(
            f"{cls.__qualname__}.{name} would hide the tool's run-scoped {name} (self.{name} comes from its binding); "
            "give the class attribute another name"
        )


def derived_tool_name(cls: type) -> str:
    """The default tool_name of ``cls``; a name the class cannot give is refused, asking for ``tool_name``.

    Without this the error quoted a ``tool_name`` the user never set.
    """
    name = default_tool_name(cls.__name__)
    if not NAME_PATTERN.fullmatch(name):
        raise ConfigurationError(
            f"{cls.__qualname__}: the tool_name derived from the class name, {name!r}, is not valid "
            "(1-64 letters, digits, '_' or '-'); set tool_name = '...' on the class"
        )
    return name


def default_tool_name(class_name: str) -> str:
    """``HelpCenterLookupTool`` -> ``help_center_lookup``; ``RésuméTool`` -> ``resume``."""
    return underscored_name(class_name, "tool")


def underscored_name(class_name: str, suffix: str) -> str:
    """``class_name`` in snake case without its ``_suffix``: the default tool_name and agent_id.

    Accented Latin letters lose their accents first (``RésuméTool`` -> ``resume``),
    as a declared name must be ASCII; the suffix was kept, and the name refused,
    when a non-ASCII letter hid the word boundary. Letters with no ASCII form stay,
    and the caller refuses the name, asking for an explicit one.
    """
    decomposed = unicodedata.normalize("NFKD", class_name)
    ascii_name = "".join(char for char in decomposed if not unicodedata.combining(char))
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", ascii_name).lower()
    ending = f"_{suffix}"
    return snake[: -len(ending)] if snake.endswith(ending) and snake != ending else snake


def default_class_name(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[_\-]+", name) if part) or "Anonymous"


__all__ = [
    "NAME_PATTERN",
    "check_call",
    "default_class_name",
    "default_tool_name",
    "derived_tool_name",
    "refuse_shadowed_bindings",
    "takes_arguments",
    "underscored_name",
]
