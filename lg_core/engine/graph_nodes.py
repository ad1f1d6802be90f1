"""A graph node (step key ``<frame path>/node-<N>/<node name>``): one node execution of a driven frame.

Its body is the entrypoint class's (``entrypoint_class.step_body(scope)``,
lg_core.engine.driven_frames): the engine claims, leases, executes and commits
the step like any other, and the Graph decides what the node does and where the
run goes next. The branches of a parallel group are sibling steps of one frame,
committed one after another in this process under the frame's lock, and against
other processes under its optimistic version: the transition re-runs on the
frame's latest state, so exactly one branch's commit sees every branch done and
schedules the join.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from lg_core.engine._step_kind import StepBody, StepKind
from lg_core.engine._step_scope import StepScope

GRAPH_NODE_KIND: Final[Literal["graph_node"]] = "graph_node"


def driven_body(scope: StepScope) -> StepBody:
    """The body the run's entrypoint class builds for this step."""
    body: StepBody = scope.run.entrypoint_class.step_body(scope)
    return body


def _siblings_may_commit(scope: StepScope) -> bool:
    """Whether other node steps of the frame may be committing now: a parallel group's branches.

    Only a step scheduled alongside others has siblings; a step alone in the frame's ``active``
    list when it read the frame stays alone, since only an active step's commit schedules more.
    """
    active = getattr(scope.frame.checkpoint, "data", {}).get("active", ())
    return len(active) > 1


def _node_name(step_input: dict[str, Any] | None) -> str:
    return str((step_input or {}).get("node", ""))


GRAPH_NODE = StepKind(
    name=GRAPH_NODE_KIND,
    key_shape="<frame path>/node-<N>/<node name>",
    task_name="lg.graph_node",
    queue="lg.orchestrate",
    body=driven_body,
    takes_input=True,
    has_running_siblings=_siblings_may_commit,
    label=_node_name,
)


def node_step_key(frame_path: str, number: int, node: str) -> str:
    """The key of the ``number``-th node execution of a frame (1-based), running ``node``."""
    return f"{frame_path}/node-{number}/{node}"


__all__ = ["GRAPH_NODE", "GRAPH_NODE_KIND", "node_step_key"]
