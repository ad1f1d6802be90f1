"""A subagent turn (step key ``<frame path>/subagent-<N>/<task name>``): one turn of a delegated conversation.

Its body is the parent Agent class's (``entrypoint_class.subagent_turn_body(scope)``):
the engine claims, leases, executes and commits the step like any other, and the
subagents package runs the child's turn as a child run and records how it ended in
the manager's ledger, which lives in the parent frame's checkpoint. Turns of
different children run at once, so their commits race on the parent's frame like
parallel tool calls: each re-runs its transition on the frame's latest state.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from lg_core.engine._step_kind import StepBody, StepKind
from lg_core.engine._step_scope import StepScope

SUBAGENT_TURN_KIND: Final[Literal["subagent_turn"]] = "subagent_turn"


def subagent_turn_body(scope: StepScope) -> StepBody:
    """The body the parent Agent class builds for this turn."""
    body: StepBody = scope.run.entrypoint_class.subagent_turn_body(scope)
    return body


def _siblings_may_commit(scope: StepScope) -> bool:
    return True  # other children's turns and the parent's own steps commit to the same frame


def _task_name(step_input: dict[str, Any] | None) -> str:
    return str((step_input or {}).get("subagent_id", "")).rpartition("/")[2]


SUBAGENT_TURN = StepKind(
    name=SUBAGENT_TURN_KIND,
    key_shape="<frame path>/subagent-<N>/<task name>",
    task_name="lg.subagent_turn",
    queue="lg.orchestrate",
    body=subagent_turn_body,
    takes_input=True,
    has_running_siblings=_siblings_may_commit,
    label=_task_name,
)


def subagent_turn_key(frame_path: str, number: int, task_name: str) -> str:
    """The key of the ``number``-th queued subagent turn of a frame (unique per frame), for ``task_name``."""
    return f"{frame_path}/subagent-{number}/{task_name}"


__all__ = ["SUBAGENT_TURN", "SUBAGENT_TURN_KIND", "subagent_turn_key"]
