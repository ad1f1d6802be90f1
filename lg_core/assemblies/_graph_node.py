"""One Graph node execution: the body of a ``graph_node`` step.

Execute (outside any transaction): run the node's assembly as a child run, one per attempt
its policy allows (lg_core.assemblies._step_attempts): each attempt's child has an id derived
from this step and the attempt's number, so a step executed again finds its attempts' children
instead of starting others. The child receives the caller's history and application context
only when the node opts in (``node(Agent, history=True, context=True)``); the start node's first
execution is also given the history the run's session held. Commit: the node's
record, every attempt in it, and the route it takes (lg_core.assemblies._graph_frame.NodeCommit),
or, for a failure no ``error_edge`` recovers once its retries are spent, the run's failure with
the child's error (a timed-out node's AssemblyStepTimeoutError as it is). On a worker each
attempt's child runs on other workers while this step parks (a ``waiting`` commit guarded by the
child still running); the child's ending wakes it, and it executes again to commit or to start the
next attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lg_core.assemblies._graph_frame import NodeCommit
from lg_core.assemblies._graph_rules import GraphSpec
from lg_core.assemblies._step_attempts import AttemptedChild, Delayed, Settled, park_until
from lg_core.assemblies.child_runs import park_on_child, stream_step
from lg_core.assemblies.declarations import ErrorEdge
from lg_core.assemblies.swarm_members import register_no_seat
from lg_core.assemblies.trajectory import bounded_output, describe_error
from lg_core.engine.driven_frames import StepScope, Transition, run_history, session_history
from lg_core.errors import AssemblyError, AssemblyStepTimeoutError
from lg_core.usage import Usage

if TYPE_CHECKING:
    from lg_core.engine.driven_frames import FrameState
    from lg_core.store import StepCommit


class NodeFailed(AssemblyError):
    """A Graph node's child run failed and no ``error_edge`` of the node routes its error."""


class GraphNodeStep:
    partial_text = ""  # a node streams no text of its own (StepBody)

    def __init__(self, scope: StepScope, spec: GraphSpec) -> None:
        self.scope, self.spec = scope, spec
        self.input: dict[str, Any] = dict(scope.input or {})
        self.node = spec.node_named(self.input["node"])
        self.attempts = AttemptedChild(
            scope,
            self.node.policy,
            f"graph node {self.node.name}",
            self.node.assembly,
            self.input["input"],
            stream_step(scope, self.node.name, f"{self.node.name}-{self.input['n']}", self.input.get("branch")),
            options=self._opted_in(),
            prepare=register_no_seat,
        )

    def perform(self) -> Transition:
        self.scope.check_interrupt()
        return self._decide()

    def _opted_in(self) -> dict[str, Any]:
        """The run's history (its session's, else the caller's) and application context, for a node that
        opts in to them; the start node's first execution also continues the conversation the run's
        session held."""
        invocation = self.scope.run.invocation
        options: dict[str, Any] = {}
        history = run_history(self.scope) if self.node.history else ()
        if not history and self.input["n"] == 1:
            history = session_history(self.scope)
        if history:
            options["history"] = list(history)
        if self.node.context:
            options["context"] = invocation.context.to_dict()
        return options

    def _decide(self) -> Transition:
        """Attempt the node until it settles (the transition committing its outcome) or an attempt's
        child runs on the workers (the transition parking the step on it)."""
        outcome = self.attempts.settle()
        if isinstance(outcome, Delayed):
            return park_until(self.scope, outcome.until, still_open=self._still_open, what="graph node")
        if isinstance(outcome, str):
            return self._park(outcome)
        return self._after(outcome)

    def _still_open(self, state: FrameState) -> bool:
        """Whether the frame still expects this step's commit."""
        scope = self.scope
        return scope.key in state.checkpoint.data["active"]  # type: ignore[attr-defined]

    def _park(self, child_id: str) -> Transition:
        """Commit the step as waiting for its child; a child ended by then is read as the step's
        next execution would read it (child_runs.park_on_child)."""
        scope = self.scope
        return park_on_child(
            scope,
            child_id,
            still_open=self._still_open,
            after=lambda _child, _child_id: self._decide(),
            what="graph node",
            seen=self.attempts.seen,
        )

    def _after(self, settled: Settled) -> Transition:
        """The transition of a settled node: its result and route, its recovery, or the run's failure."""
        scope = self.scope
        record = self._record(settled)
        message = scope.run.invocation.message
        if settled.error is None:
            return lambda state: NodeCommit(scope, self.spec, state, message).completed(record)
        error = settled.error
        recovery = self._recovery_for(error)
        if recovery is None:
            failure = error
            if not isinstance(error, AssemblyStepTimeoutError):
                failure = NodeFailed(
                    f"graph node {self.node.name} (child run {settled.child_id}) ended {settled.child.outcome}: "
                    f"{describe_error(error)}"
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

    def _record(self, settled: Settled) -> dict[str, Any]:
        """What the frame keeps of this execution: bounded, JSON, enough to rebuild its Step and RunResult.

        Its attempts' times are their child runs' own (created, finished), the same whichever
        execution of this step reads them: a step woken or executed again after a crash reports when
        the node really ran. Its usage is every attempt's.
        """
        child, attempts = settled.child, settled.attempts
        result = child.result if settled.error is None else None
        structured = None
        if result is not None and result.structured_result is not None:
            value, _cut = bounded_output(result.structured_result.value)
            structured = {"schema_name": result.structured_result.schema_name, "value": value}
        text, _cut = bounded_output(result.text if result is not None else (child.response or ""))
        usage = Usage.from_dict(attempts[0]["usage"])
        for attempt in attempts[1:]:
            usage = usage + Usage.from_dict(attempt["usage"])
        return {
            "key": self.scope.key,
            "id": f"{self.node.name}-{self.input['n']}",
            "node": self.node.name,
            "status": _status_of(settled),
            "text": text,
            "structured": structured,
            "usage": usage.to_dict(),
            "started_at": attempts[0]["started_at"],
            "finished_at": attempts[-1]["finished_at"],
            "error": attempts[-1]["error"],
            "attempts": attempts,
            "predecessors": list(self.input.get("predecessors") or ()),
            "branch": self.input.get("branch"),
            "child_run_id": settled.child_id,
        }


def _status_of(settled: Settled) -> str:
    """The node's status: its last attempt's when it completed, was cancelled or timed out, else failed."""
    last = settled.attempts[-1]["status"]
    return last if last in ("completed", "cancelled", "timed_out") else "failed"


__all__ = ["GraphNodeStep", "NodeFailed"]
