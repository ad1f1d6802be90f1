"""What a body of its own for a tool call builds on: the engine's tool-call step.

An Agent class may execute some of its tool calls itself (``tool_step_body``, a
subagent control tool whose result is the manager's ledger in the frame's
checkpoint). Such a body extends ``ToolCall``, which records the result, answers
the turn when its last call commits and schedules the next model turn; it parks
through ``StepScope.commit_for`` like any step waiting on something.
"""

from __future__ import annotations

from lg_core.engine._tool_call import ToolCall
from lg_core.engine.subagent_turns import SUBAGENT_TURN_KIND, subagent_turn_key

__all__ = ["SUBAGENT_TURN_KIND", "ToolCall", "subagent_turn_key"]
