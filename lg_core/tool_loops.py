"""Tool-loop detection: stop an agent repeating a tool call that cannot make progress.

An agent opts in with ``detect_tool_loops = True`` (the spec's defaults:
``warning_at=3``, ``terminate_at=5``) or a mapping such as
``{"warning_at": 3, "terminate_at": 5, "except": [AccountRefreshTool]}``.

A call's *signature* is its tool name and its normalized arguments; its
*result* is the result's status and content. Each time a call returns the same
result as the last call with the same signature, that signature's count grows;
a changed result starts it again at one. The result that brings the count to
``warning_at`` carries a warning for the model to change approach, the one that
brings it to ``terminate_at - 1`` the final warning, and the next identical call
stops the run with ToolLoopError before the tool runs again.

The calls of one model turn run in parallel, on any worker, and commit in any
order, so no call can wait for an identical sibling's result. Two rules keep the
outcome the same however they interleave:

* Whether a call may run is decided when its turn schedules it
  (``repeats_in_turn``): the signature's count before the turn plus the
  identical calls earlier in the same turn, in call order, is stored with the
  call's step input. The tool step decides from that number alone, so a retried
  or resumed step decides as the first attempt did, and a batch of identical
  calls always runs the same ones. Identical calls of one turn count as repeats
  of each other: none of them can make progress on another's result.
* The counts and warnings are brought up to date once per turn, by the call
  that completes it, observing every result in call order (the order the
  repeats were numbered in), never in commit order.

The counts live in the frame's checkpoint, so they survive a crash and a resume
and are the same on every worker. Only the most recent ``MAX_TRACKED_SIGNATURES``
signatures are kept: the checkpoint is written with every step and must stay
small, and a loop repeats recent calls.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lg_core.errors import ConfigurationError, ToolLoopError

DEFAULT_WARNING_AT = 3
DEFAULT_TERMINATE_AT = 5
MAX_TRACKED_SIGNATURES = 32
_KEYS = frozenset({"warning_at", "terminate_at", "except"})

# {signature: [result digest, count]}, oldest first; replaced wholesale, never mutated.
LoopCounts = dict[str, list[Any]]


@dataclass(frozen=True, slots=True)
class ToolLoopPolicy:
    """When repeats warn and when they stop the run; tools named in ``excluded`` never count."""

    warning_at: int = DEFAULT_WARNING_AT
    terminate_at: int = DEFAULT_TERMINATE_AT
    excluded: frozenset[str] = frozenset()

    def watches(self, tool_name: str) -> bool:
        return tool_name not in self.excluded

    def repeats_in_turn(self, counts: LoopCounts, calls: list[tuple[str, Any]]) -> list[int | None]:
        """For each ``(name, arguments)`` of one turn, in call order: the identical calls before it.

        That is the signature's count in ``counts`` (the checkpoint before the
        turn) plus the identical calls earlier in ``calls``; None for a tool this
        policy does not watch. It is what ``check_may_run`` decides from.
        """
        earlier: dict[str, int] = {}
        numbers: list[int | None] = []
        for name, arguments in calls:
            if not self.watches(name):
                numbers.append(None)
                continue
            signature = call_signature(name, arguments)
            entry = counts.get(signature)
            numbers.append((entry[1] if entry is not None else 0) + earlier.get(signature, 0))
            earlier[signature] = earlier.get(signature, 0) + 1
        return numbers

    def check_may_run(self, repeats: int, name: str) -> None:
        """Raise ToolLoopError when a call with ``repeats`` identical calls before it is the terminating repeat.

        ``repeats`` comes from ``repeats_in_turn``; the call's body must not run.
        """
        if repeats >= self.terminate_at - 1:
            raise ToolLoopError(
                f"the model called {name!r} with the same arguments {repeats + 1} times without progress, "
                "getting the same result each time or calling it again in the same turn "
                f"(detect_tool_loops terminate_at={self.terminate_at}); the run was stopped instead of running "
                "it again. Change the prompt or the tool so a repeat can make progress, or exclude the tool "
                "with detect_tool_loops = {'except': [...]}"
            )

    def repeats_so_far(self, counts: LoopCounts, name: str, arguments: Any) -> int:
        """The identical calls ``counts`` holds for one call (for a call stored without its number)."""
        entry = counts.get(call_signature(name, arguments))
        return entry[1] if entry is not None else 0

    def warning(self, count: int, name: str) -> str | None:
        """The text added to the result that brought a signature to ``count``, if any."""
        if count >= self.terminate_at - 1:
            return (
                f"Final warning: this exact call to {name} has now returned this exact result {count} times. "
                "Calling it again with the same arguments will stop the run. Change your approach or answer "
                "with what you have."
            )
        if count >= self.warning_at:
            return (
                f"Warning: this exact call to {name} has returned this exact result {count} times. Repeating "
                "it will not make progress; change your approach (other arguments, another tool, or answer "
                "with what you have)."
            )
        return None


def observe(counts: LoopCounts, name: str, arguments: Any, result: Mapping[str, Any]) -> tuple[LoopCounts, int]:
    """``counts`` with one finished call recorded, and that call's signature's new count.

    ``result`` is the serialized ToolResult (status and content). A new dict is
    returned, with the signature moved to the newest place; ``counts`` is unchanged.
    """
    signature = call_signature(name, arguments)
    digest = _digest({"status": result.get("status"), "content": result.get("content")})
    previous = counts.get(signature)
    count = previous[1] + 1 if previous is not None and previous[0] == digest else 1
    updated = {key: value for key, value in counts.items() if key != signature}
    updated[signature] = [digest, count]
    while len(updated) > MAX_TRACKED_SIGNATURES:
        del updated[next(iter(updated))]
    return updated, count


def call_signature(name: str, arguments: Any) -> str:
    """The tool name and arguments, normalized (key order and spacing do not matter)."""
    return _digest([name, arguments])


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def policy_from_declaration(value: Any, owner: str) -> ToolLoopPolicy | None:
    """An agent's ``detect_tool_loops`` as a policy (None when off); ConfigurationError when invalid."""
    if value is None or value is False:
        return None
    if value is True:
        return ToolLoopPolicy()
    if isinstance(value, ToolLoopPolicy):
        return value
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{owner}.detect_tool_loops must be True, False or a mapping like "
            f"{{'warning_at': 3, 'terminate_at': 5, 'except': [SomeTool]}}, got {type(value).__name__}"
        )
    unknown = sorted(str(key) for key in value if key not in _KEYS)
    if unknown:
        raise ConfigurationError(
            f"{owner}.detect_tool_loops has unknown option {unknown[0]!r}; options: {sorted(_KEYS)}"
        )
    warning_at = _count(value.get("warning_at", DEFAULT_WARNING_AT), "warning_at", owner)
    terminate_at = _count(value.get("terminate_at", DEFAULT_TERMINATE_AT), "terminate_at", owner)
    if warning_at < 2 or terminate_at <= warning_at:
        raise ConfigurationError(
            f"{owner}.detect_tool_loops needs warning_at >= 2 and terminate_at > warning_at, "
            f"got warning_at={warning_at}, terminate_at={terminate_at}"
        )
    return ToolLoopPolicy(warning_at, terminate_at, _excluded_names(value.get("except", ()), owner))


def _count(value: Any, name: str, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{owner}.detect_tool_loops {name} must be an integer, got {value!r}")
    return value


def _excluded_names(entries: Any, owner: str) -> frozenset[str]:
    """Tool classes, tool instances or names (the spec's symbols are strings here) as tool names."""
    from lg_core.tool import Tool

    if isinstance(entries, (str, type)) or isinstance(entries, Tool):
        entries = [entries]
    names = set()
    for entry in entries:
        if isinstance(entry, str) and entry:
            names.add(entry)
        elif isinstance(entry, type) and issubclass(entry, Tool):
            names.add(entry.tool_name)
        elif isinstance(entry, Tool):
            names.add(entry.tool_name)
        else:
            raise ConfigurationError(
                f"{owner}.detect_tool_loops 'except' takes tool classes, tool instances or tool names, got {entry!r}"
            )
    return frozenset(names)


__all__ = [
    "DEFAULT_TERMINATE_AT",
    "DEFAULT_WARNING_AT",
    "MAX_TRACKED_SIGNATURES",
    "LoopCounts",
    "ToolLoopPolicy",
    "call_signature",
    "observe",
    "policy_from_declaration",
]
