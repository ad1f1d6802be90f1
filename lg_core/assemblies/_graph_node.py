"""One Graph node execution: the body of a ``graph_node`` step.

Execute (outside any transaction): run the node's assembly as a child run under an id
derived from this step (lg_core.assemblies._child_runs), so an attempt executed again
finds the child instead of starting another; the start node's first execution is given
the history the run's session held, as its history. Commit: the node's record and the route
it takes (lg_core.assemblies._graph_frame.NodeCommit), or, for a failure no
``error_edge`` recovers, the run's failure with the child's error. On a worker the
child runs on other workers while this step parks (a ``waiting`` commit guarded by the
child still running); the child's ending wakes it, and it executes again to commit.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lg_core.assemblies._child_runs import park_on_child, start_or_find_child, step_child_id, stream_step
from lg_core.assemblies._graph_frame import NodeCommit
from lg_core.assemblies._graph_rules import GraphSpec
from lg_core.assemblies.declarations import ErrorEdge
from lg_core.assemblies.swarm_members import register_no_seat
from lg_core.assemblies.trajectory import bounded_output, describe_error
from lg_core.engine.driven_frames import StepScope, Transition, session_history
from lg_core.errors import AssemblyError

if TYPE_CHECKING:
    from lg_core.engine.driven_frames import FrameState
    from lg_core.run import Run
    from lg_core.store import RunRecord, StepCommit


class NodeFailed(AssemblyError):
    """A Graph node's child run failed and no ``error_edge`` of the node routes its error."""


class GraphNodeStep:
    partial_text = ""  # a node streams no text of its own (StepBody)

    def __init__(self, scope: StepScope, spec: GraphSpec) -> None:
        self.scope, self.spec = scope, spec
        self.input: dict[str, Any] = dict(scope.input or {})
        self.node = spec.node_named(self.input["node"])
        # The ended child's stored record, when finding it already read it (_record needs its times).
        self.seen: dict[str, RunRecord] = {}

    def perform(self) -> Transition:
        scope = self.scope
        scope.check_interrupt()
        child_id = step_child_id(scope, scope.key)
        step = stream_step(scope, self.node.name, f"{self.node.name}-{self.input['n']}", self.input.get("branch"))
        register_no_seat(child_id)
        # The start node's first execution continues the conversation the run's session held.
        history = session_history(scope) if self.input["n"] == 1 else ()
        options = {"history": list(history)} if history else {}
        child = start_or_find_child(
            scope, self.node.assembly, self.input["input"], child_id, step, seen=self.seen, **options
        )
        if child is None:
            return self._park(child_id)
        scope.check_interrupt()  # a child stopped by its parent's cancel or deadline: the parent stops too
        return self._after(child, child_id)

    def _park(self, child_id: str) -> Transition:
        """Commit the step as waiting for its child, unless the child has ended by then (_child_runs)."""
        scope = self.scope
        return park_on_child(
            scope,
            child_id,
            still_open=lambda state: scope.key in state.checkpoint.data["active"],  # type: ignore[attr-defined]
            after=self._after,
            what="graph node",
            seen=self.seen,
        )

    def _after(self, child: Run, child_id: str) -> Transition:
        """The transition of a node whose child ended: its result and route, its recovery, or the run's failure."""
        scope = self.scope
        record = self._record(child, child_id)
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

    def _record(self, child: Run, child_id: str) -> dict[str, Any]:
        """What the frame keeps of this execution: bounded, JSON, enough to rebuild its Step and RunResult.

        Its times are the child run's own (created, finished), the same whichever attempt of
        this step reads them: a step woken or executed again after a crash reports when the
        node really ran.
        """
        stored = self.seen.get(child_id) or self.scope.engine.store.load_run(child_id)
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
            "started_at": _iso(stored.created_at),
            "finished_at": _iso(stored.finished_at or stored.updated_at),
            "error": None if child.error is None else describe_error(child.error),
            "predecessors": list(self.input.get("predecessors") or ()),
            "branch": self.input.get("branch"),
            "child_run_id": child_id,
        }


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


__all__ = ["GraphNodeStep", "NodeFailed"]
