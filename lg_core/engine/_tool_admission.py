"""Admitting a model turn's tool calls: their ids and the agent's call budget checked, and each
call made a step (or a call waiting for an exclusive one before it) with what it runs with.

The turn's transition commits what :func:`scheduled_calls` returns: the frame's pending
calls and the tool steps the commit creates.
"""

from __future__ import annotations

import re
from typing import Any

from lg_core.code_mode.controls import CONTROL_NAMES, STOP, WAIT
from lg_core.engine._checkpoint import PendingTool
from lg_core.engine._frames import FrameState
from lg_core.engine._turn_keys import CODE_EXEC, TOOL, tool_step_key
from lg_core.errors import MalformedToolCallError, OutputLimitError
from lg_core.store import NewStep

# A tool call id becomes part of its step's key (``<frame>/turn-N/tool/<id>``), which the
# store keeps in a 300-character column; PostgreSQL refuses longer values and NUL outright.
OBSERVING = frozenset({WAIT, STOP})  # the controls that act on a running program
_TOOL_CALL_ID = re.compile(r"[^\x00-\x1f\x7f]{1,128}")


def check_tool_calls(agent_class: Any, tool_uses: Any, already: int) -> None:
    """Refuse calls whose ids cannot key a step, and calls past the agent's ``max_tool_calls``.

    ``already`` is the number of tool calls the frame made before this turn.
    """
    ids = [use.id for use in tool_uses]
    if len(set(ids)) != len(ids):
        raise MalformedToolCallError(f"the model used the same tool call id twice in one response: {ids}")
    unusable = [call_id for call_id in ids if not _TOOL_CALL_ID.fullmatch(call_id)]
    if unusable:
        raise MalformedToolCallError(
            f"the model's tool call id {unusable[0][:80]!r} (length {len(unusable[0])}) is not 1-128 characters "
            "without control characters; LittleGhost keys the call's step by it"
        )
    limit = agent_class.limits["max_tool_calls"]
    counted = counted_calls(agent_class, tool_uses)
    if already + counted > limit:
        raise OutputLimitError(
            f"{agent_class.__name__} asked for tool call {already + counted} "
            f"but max_tool_calls is {limit}; "
            "raise limits = {'max_tool_calls': ...} if the task needs more"
        )


def counted_calls(agent_class: Any, tool_uses: Any) -> int:
    """How many of ``tool_uses`` count against ``max_tool_calls``: all but the code-mode controls,
    whose programs' brokered calls count instead (as their steps commit)."""
    if agent_class.code_mode_options() is None:
        return len(tool_uses)
    return sum(1 for use in tool_uses if use.name not in CONTROL_NAMES)


def loop_repeats(agent_class: Any, state: FrameState, tool_uses: Any) -> list[int | None]:
    """Each call's identical calls before it, for tool-loop detection (None where it is off).

    Numbered here, where the whole batch is known, and stored with each call:
    its step decides from that number whether it may run, so identical calls
    running in parallel (on any worker) cannot all miss each other, and a
    retried step decides the same way (lg_core.tool_loops).
    """
    policy = agent_class._tool_loop_policy
    if policy is None:
        return [None] * len(tool_uses)
    repeats: list[int | None] = policy.repeats_in_turn(
        state.checkpoint.tool_loops, [(use.name, dict(use.input)) for use in tool_uses]
    )
    return repeats


def scheduled_calls(
    state: FrameState,
    turn: int,
    tool_uses: Any,
    exclusive: dict[str, bool],
    idempotent_tools: frozenset[str],
    repeats: list[int | None],
    code_mode: bool = False,
    program_holder: str | None = None,
) -> tuple[list[PendingTool], list[NewStep]]:
    """The frame's pending calls and the steps to create for them.

    An exclusive call after another exclusive one of the same turn waits (no step
    yet, its call kept on the pending entry) until the one before it finished. With
    ``code_mode``, a call of ``exec``, ``wait`` or ``stop`` is a ``code_exec`` step; a ``wait``
    or ``stop`` carries ``program_holder``, the process running the program (its step's route).
    """
    pending: list[PendingTool] = []
    new_steps: list[NewStep] = []
    exclusive_seen = False
    for use, repeated in zip(tool_uses, repeats, strict=True):
        key = tool_step_key(state.path, turn, use.id)
        is_exclusive = exclusive.get(use.name, False)
        call: dict[str, Any] = {"id": use.id, "name": use.name, "input": dict(use.input)}
        if use.input_error:
            call["input_error"] = use.input_error
        if use.name in idempotent_tools:
            call["idempotent"] = True
        if repeated is not None:
            call["loop_repeats"] = repeated
        if code_mode and program_holder is not None and use.name in OBSERVING:
            call["program_holder"] = program_holder
        if is_exclusive and exclusive_seen:
            pending.append(PendingTool(use.id, use.name, key, True, "waiting", call))
            continue
        exclusive_seen = exclusive_seen or is_exclusive
        pending.append(PendingTool(use.id, use.name, key, is_exclusive, "scheduled"))
        kind = CODE_EXEC if code_mode and use.name in CONTROL_NAMES else TOOL
        new_steps.append(NewStep(key=key, frame_id=state.id, kind=kind, input=call))
    return pending, new_steps


__all__ = ["check_tool_calls", "counted_calls", "loop_repeats", "scheduled_calls"]
