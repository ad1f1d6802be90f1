"""CodeModeOptions: what an Agent's ``code_mode`` declaration asks for, checked at class definition.

``code_mode = True`` takes every default; the options form is a mapping with
``limits`` (overrides of the session's DEFAULT_LIMITS), ``except`` (tool names
that stay in the conversation instead of moving into the program catalog),
``sandbox`` (the backend, or a mapping of backend and policy, that contains
each program; the platform's enforcing default when absent) and ``engine``
(only ``"python"``: this port's engine runs model-written Python). Anything
else is refused by name, so a misspelt option never silently does nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lg_core.code_mode.session import code_mode_limits
from lg_core.errors import ConfigurationError, SandboxConfigurationError
from lg_core.sandbox import Sandbox
from lg_core.sandbox.policy import POLICY_KEYS, Policy

OPTION_NAMES = ("engine", "except", "limits", "sandbox")
ENGINES = ("python",)
# A program gets a fresh temporary workspace of its own (its root, read-write) and no network.
DEFAULT_SANDBOX: Mapping[str, Any] = {"provider": "native", "files": {"root": "read_write"}, "network": "none"}


@dataclass(frozen=True)
class CodeModeOptions:
    """A checked ``code_mode`` declaration; see the module docstring."""

    limits: Mapping[str, int] = field(default_factory=lambda: code_mode_limits(None))
    except_: frozenset[str] = frozenset()
    sandbox: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_SANDBOX))
    engine: str = "python"


def program_tool_names(options: CodeModeOptions, tools: Iterable[Any]) -> frozenset[str]:
    """The tools that move into the program catalog: every tool but those named in ``except`` and
    those marked ``at_most_once``. Such a tool stays in the conversation: a program is run again
    from its start when its step is, and only a step of its own can keep the at-most-once promise.
    """
    return frozenset(
        tool.tool_name
        for tool in tools
        if tool.tool_name not in options.except_ and not getattr(tool, "at_most_once", False)
    )


def code_mode_options(value: Any, owner: str) -> CodeModeOptions | None:
    """``value`` (an Agent's ``code_mode``) checked: None when off, else its CodeModeOptions."""
    if value is None or value is False:
        return None
    if value is True:
        return CodeModeOptions()
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{owner}.code_mode must be True or a dict of {', '.join(OPTION_NAMES)}, got {type(value).__name__}"
        )
    unknown = sorted(str(key) for key in value if key not in OPTION_NAMES)
    if unknown:
        raise ConfigurationError(
            f"{owner}.code_mode has unknown option {unknown[0]!r}; known options: {', '.join(OPTION_NAMES)}"
        )
    engine = value.get("engine") or "python"
    if engine not in ENGINES:
        raise ConfigurationError(
            f"{owner}.code_mode option 'engine' must be 'python' (the engine of this port), got {engine!r}"
        )
    return CodeModeOptions(
        limits=_limits(value.get("limits"), owner),
        except_=_excepted(value.get("except"), owner),
        sandbox=_sandbox(value.get("sandbox"), owner),
        engine=engine,
    )


def _limits(value: Any, owner: str) -> dict[str, int]:
    if value is not None and not isinstance(value, Mapping):
        raise ConfigurationError(f"{owner}.code_mode option 'limits' must be a dict, got {type(value).__name__}")
    try:
        return code_mode_limits(value)
    except ConfigurationError as error:
        raise ConfigurationError(f"{owner}.code_mode option 'limits': {error}") from None


def _excepted(value: Any, owner: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple, set, frozenset)) or not all(isinstance(n, str) for n in names):
        raise ConfigurationError(f"{owner}.code_mode option 'except' must be a list of tool names, got {value!r}")
    return frozenset(names)


def _sandbox(value: Any, owner: str) -> dict[str, Any]:
    if value is None:
        return dict(DEFAULT_SANDBOX)
    if isinstance(value, str):
        return _sandbox({"provider": value}, owner)
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{owner}.code_mode option 'sandbox' must be a backend name or a dict, got {type(value).__name__}"
        )
    settings = {**DEFAULT_SANDBOX, **value}
    try:
        Sandbox.resolve_provider(settings["provider"])
        Policy.coerce({key: settings[key] for key in POLICY_KEYS if key in settings})
    except (SandboxConfigurationError, TypeError, ValueError) as error:
        raise ConfigurationError(f"{owner}.code_mode option 'sandbox': {error}") from None
    return settings


__all__ = ["DEFAULT_SANDBOX", "OPTION_NAMES", "CodeModeOptions", "code_mode_options", "program_tool_names"]
