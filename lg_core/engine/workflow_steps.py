"""A workflow's perform step (step key ``<frame path>/perform``): a Workflow run's one driven step.

Its body is the entrypoint class's (``entrypoint_class.step_body(scope)``,
lg_core.engine.driven_frames), as a graph node's is: the Workflow runs its
``perform`` by deterministic replay, and the engine claims, leases, executes and
commits the step like any other. On a worker the step parks while a child run it
needs still runs, and each child's ending wakes it (its child runs name this step),
so one step key serves the whole run however many times ``perform`` is replayed.
"""

from __future__ import annotations

from typing import Final, Literal

from lg_core.engine._step_kind import StepKind
from lg_core.engine.graph_nodes import driven_body

WORKFLOW_KIND: Final[Literal["workflow"]] = "workflow"

WORKFLOW = StepKind(
    name=WORKFLOW_KIND,
    key_shape="<frame path>/perform",
    task_name="lg.workflow",
    queue="lg.orchestrate",
    body=driven_body,
)


def perform_step_key(frame_path: str) -> str:
    """The key of a workflow frame's perform step."""
    return f"{frame_path}/perform"


__all__ = ["WORKFLOW", "WORKFLOW_KIND", "perform_step_key"]
