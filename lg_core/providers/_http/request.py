"""What the adapters' request builders share, each building its own API's body.

* Model settings are trusted application values sent as given (the spec: build
  them in application code), except the body keys an adapter builds from the
  request: a setting naming one is a ConfigurationError, not a silent override.
* The APIs with a top-level system prompt (Anthropic's ``system``, Gemini's
  ``systemInstruction``) take the agent's prompt and any system message of the
  conversation there.
* A ``tool_choice`` is a keyword (``auto``, ``none``, ``required``) or a tool
  name (or ``{"name": ...}``); each adapter spells the result its API's way.
* The APIs with two roles (Anthropic, Gemini) refuse two turns of one role in a
  row and a turn with nothing in it: consecutive messages of one role are joined.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from lg_core.datamap import thaw
from lg_core.errors import ConfigurationError
from lg_core.models.request import ModelRequest


def reserved_setting_error(name: Any, adapter: str, reserved: Set[str]) -> ConfigurationError:
    """The error for a model setting that would replace a body key the adapter builds."""
    return ConfigurationError(
        f"model setting {name!r} cannot be set: the {adapter} adapter builds it from the request "
        f"(reserved: {', '.join(sorted(reserved))})"
    )


def plain_settings(settings: Mapping[str, Any], adapter: str, reserved: Set[str]) -> dict[str, Any]:
    """The model settings as top-level body fields, none of them ``reserved``."""
    clash = sorted(reserved & set(settings))
    if clash:
        raise reserved_setting_error(clash[0], adapter, reserved)
    return {str(key): thaw(value) for key, value in settings.items()}


def system_text(request: ModelRequest) -> str:
    """The agent's system prompt, then the text of any system message in the conversation."""
    parts = [request.system or "", *(message.text for message in request.messages if message.role == "system")]
    return "\n\n".join(part for part in parts if part)


def chosen_tool(choice: Any) -> str:
    """The keyword or tool name a ``tool_choice`` gives (``{"name": ...}`` gives its name); a ConfigurationError
    for anything else."""
    if isinstance(choice, Mapping) and "name" in choice:
        choice = choice["name"]
    if not isinstance(choice, str) or not choice:
        raise ConfigurationError(f"tool_choice must be 'auto', 'none', 'required' or a tool name, got {choice!r}")
    return choice


def add_turn(turns: list[dict[str, Any]], role: str, key: str, items: list[dict[str, Any]]) -> None:
    """Add ``items`` (under ``key``: ``content``, ``parts``) as a turn of ``role``, joined to the last
    turn when that has the same role; no items add nothing (an empty answer says nothing)."""
    if not items:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1][key].extend(items)
    else:
        turns.append({"role": role, key: items})


__all__ = ["add_turn", "chosen_tool", "plain_settings", "reserved_setting_error", "system_text"]
