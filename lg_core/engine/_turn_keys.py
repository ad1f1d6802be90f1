"""The names and step keys of the agent loop's kinds, which schedule each other.

A model turn schedules its tool calls (a code-mode control call is a tool call
of kind ``code_exec``, keyed like the others), and the call that completes a
turn schedules the next model turn, so each kind's module needs the others'
names and key shapes: they are here, not in any of those modules, so that
none imports another.
"""

from __future__ import annotations

from typing import Literal

from lg_core.engine._frames import FrameState
from lg_core.store import NewStep

MODEL: Literal["model"] = "model"
TOOL: Literal["tool"] = "tool"
CODE_EXEC: Literal["code_exec"] = "code_exec"  # a code-mode control call: exec, wait or stop


def model_step_key(frame_path: str, turn: int) -> str:
    """``<frame path>/turn-<N>/model``: the model step of turn ``turn``."""
    return f"{frame_path}/turn-{turn}/model"


def tool_step_key(frame_path: str, turn: int, call_id: str) -> str:
    """``<frame path>/turn-<N>/tool/<call id>``: the step of one tool call the model asked for in turn ``turn``."""
    return f"{frame_path}/turn-{turn}/tool/{call_id}"


def next_turn(state: FrameState, turn: int) -> NewStep:
    """The model step of turn ``turn`` of ``state``'s frame, scheduled by the commit before it."""
    return NewStep(key=model_step_key(state.path, turn), frame_id=state.id, kind=MODEL)


__all__ = ["CODE_EXEC", "MODEL", "TOOL", "model_step_key", "next_turn", "tool_step_key"]
