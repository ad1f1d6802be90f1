"""One Graph node execution: the body of a ``graph_node`` step.

Execute (outside any transaction): run the node's assembly as a child run under an id
derived from this step (lg_core.assemblies._child_runs), so an attempt executed again
finds the child instead of starting another, and read its outcome. Commit: the node's
record and the route it takes (lg_core.assemblies._graph_frame.NodeCommit), or, for a
failure no ``error_edge`` recovers, the run's failure with the child's error.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lg_core.assemblies._child_runs import child_run_id, run_child
from lg_core.assemblies._graph_frame import NodeCommit
from lg_core.assemblies._graph_rules import GraphSpec
from lg_core.assemblies.declarations import ErrorEdge
from lg_core.assemblies.trajectory import bounded_output, describe_error
from lg_core.engine.driven_frames import StepScope, Transition
from lg_core.errors import AssemblyError

if TYPE_CHECKING:
    from lg_core.engine.driven_frames import FrameState
    from lg_core.run import Run
    from lg_core.store import StepCommit


class NodeFailed(AssemblyError):
    """A Graph node's child run failed and no ``error_edge`` of the node routes its error."""


class GraphNodeStep:
    partial_text = ""  # a node streams no text of its own (StepBody)

    def __init__(self, scope: StepScope, spec: GraphSpec) -> None:
        self.scope, self.spec = scope, spec
        self.input: dict[str, Any] = dict(scope.input or {})
        self.node = spec.node_named(self.input["node"])

    def perform(self) -> Transition:
        scope = self.scope
        scope.check_interrupt()
        started = datetime.now(UTC)
        child_id = child_run_id(scope.run.id, scope.key)
        child = run_child(scope, self.node.assembly, self.input["input"], child_id)
        scope.check_interrupt()  # a child stopped by its parent's cancel or deadline: the parent stops too
        record = self._record(child, child_id, started)
        message = scope.run.invocation.message
        if child.completed:
            return lambda state: NodeCommit(scope, self.spec, state, message).completed(record)
        error = child.error or NodeFailed(f"node {self.node.name} ended {child.outcome}")
        recovery = self._recovery_for(error)
        if recovery is None:
            failure = NodeFailed(
                f"graph node {self.node.name} (child run {child_id}) ended {child.outcome}: {describe_error(error)}"
            )
            return scope.ending("failed", failure)

        def recover(state: FrameState) -> StepCommit:
            return NodeCommit(scope, self.spec, state, message).recovered(
                record, recovery.target, recovery.input, error
            )

        return recover

    def _recovery_for(self, error: BaseException) -> ErrorEdge | None:
        """The first ``error_edge`` leaving this node whose ``on`` lists ``error``'s class."""
        return next(
            (item for item in self.spec.error_edges if item.source == self.node.name and isinstance(error, item.on)),
            None,
        )

    def _record(self, child: Run, child_id: str, started: datetime) -> dict[str, Any]:
        """What the frame keeps of this execution: bounded, JSON, enough to rebuild its Step and RunResult."""
        result = child.result
        structured = None
        if result is not None and result.structured_result is not None:
            value, _cut = bounded_output(result.structured_result.value)
            structured = {"schema_name": result.structured_result.schema_name, "value": value}
        text, _cut = bounded_output(result.text if result is not None else (child.response or ""))
        status = "completed" if child.completed else ("cancelled" if child.cancelled else "failed")
        return {
            "key": self.scope.key,
            "id": f"{self.node.name}-{self.input['n']}",
            "node": self.node.name,
            "status": status,
            "text": text,
            "structured": structured,
            "usage": child.usage.to_dict(),
            "started_at": started.isoformat(),
            "finished_at": datetime.now(UTC).isoformat(),
            "error": None if child.error is None else describe_error(child.error),
            "predecessors": list(self.input.get("predecessors") or ()),
            "branch": self.input.get("branch"),
            "child_run_id": child_id,
        }


__all__ = ["GraphNodeStep", "NodeFailed"]
