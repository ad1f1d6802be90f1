"""The step bodies an Agent declaring subagents executes itself, for the engine to call through the Agent.

``tool_step_body`` answers a control-tool call (lg_core.subagents._control_step)
and ``turn_step_body`` runs one child turn (lg_core.subagents._turn_step); the
Agent class hands them to the engine as ``tool_step_body`` and
``subagent_turn_body``.
"""

from __future__ import annotations

from typing import Any

from lg_core.subagents._control_step import SubagentControlCall
from lg_core.subagents._turn_step import SubagentTurnStep
from lg_core.subagents.control_inputs import CONTROL_TOOL_NAMES
from lg_core.subagents.options import SubagentOptions


def tool_step_body(options: SubagentOptions | None, scope: Any) -> Any:
    """The body of a control-tool call of an agent with ``options``; None for any other tool call."""
    if options is None or (scope.input or {}).get("name") not in CONTROL_TOOL_NAMES:
        return None
    return SubagentControlCall(scope, options)


def turn_step_body(options: SubagentOptions, scope: Any) -> Any:
    """The body of one ``subagent_turn`` step."""
    return SubagentTurnStep(scope, options)


__all__ = ["tool_step_body", "turn_step_body"]
