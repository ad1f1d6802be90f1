"""One Swarm member execution: the body of a Swarm run's member step.

Execute (outside any transaction): run the active member's Agent as a child run, one per
attempt its policy allows (lg_core.assemblies._step_attempts), each under an id derived from
this step and the attempt's number, so a step executed again finds its attempts' children
instead of starting others. The child's model is offered the handoff tool
(lg_core.assemblies.swarm_members) listing the member's declared routes; an accepted
handoff ends the child's run with the handoff as its ``ended_by`` value. Commit
(lg_core.assemblies._swarm_frame.MemberCommit): a handoff schedules its target member, an
answer completes the Swarm run, and a member that failed once its retries are spent fails the
run (a timed-out member with its AssemblyStepTimeoutError). On a worker the step parks while
each attempt's child runs, exactly as a Graph node's does.

The caller's history and application context reach the child only when the member opts
in (``member(Agent, history=True, context=True)``); the history is the run's (its
session's, else the invocation's). The member running the Swarm's first turn is also
given the history the run's session held, so a conversation continues across asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lg_core.assemblies._step_attempts import AttemptedChild, Delayed, Settled, park_until
from lg_core.assemblies._swarm_frame import MemberCommit
from lg_core.assemblies._swarm_rules import SwarmSpec
from lg_core.assemblies.child_runs import park_on_child, stream_step
from lg_core.assemblies.declarations import Member
from lg_core.assemblies.swarm_handoffs import HANDOFF_TOOL_NAME, SwarmProgress, journey_excerpt
from lg_core.assemblies.swarm_members import MemberSeat, register_seat
from lg_core.assemblies.trajectory import bounded_output, describe_error
from lg_core.engine.driven_frames import StepScope, Transition, run_history, session_history
from lg_core.errors import AssemblyError, AssemblyStepTimeoutError, ToolError
from lg_core.usage import Usage

if TYPE_CHECKING:
    from lg_core.engine.driven_frames import FrameState
    from lg_core.messages import Message
    from lg_core.run import Run
    from lg_core.store import StepCommit


class MemberFailed(AssemblyError):
    """A Swarm member's child run did not complete, so the Swarm has no answer."""


class MemberCall:
    """Builds a member's child run as ``start_or_find_child`` asks an assembly to, passing ``history``
    (the caller's, for a member that opts in; the session's, for the Swarm's first turn) and the
    caller's context only when the member opts in."""

    def __init__(self, member: Member, parent: Any, seat: MemberSeat, history: tuple[Message, ...]) -> None:
        self.member, self.parent, self.seat, self.history = member, parent, seat, history

    def build_run(self, message: Any, /, **options: Any) -> Run:
        register_seat(options["run_id"], self.seat.spec, self.seat.progress)
        invocation = self.parent.invocation
        if self.history:
            options["history"] = list(self.history)
        if self.member.context:
            options["context"] = invocation.context.to_dict()
        run: Run = self.member.agent.build_run(message, **options)
        return run


class SwarmMemberStep:
    partial_text = ""  # the member's text streams in its own run (StepBody)

    def __init__(self, scope: StepScope, spec: SwarmSpec) -> None:
        self.scope, self.spec = scope, spec
        self.input: dict[str, Any] = dict(scope.input or {})
        self.member = spec.member_named(self.input["node"])
        progress = SwarmProgress.from_dict(scope.frame.checkpoint.data["progress"])  # type: ignore[attr-defined]
        self.attempts = AttemptedChild(
            scope,
            self.member.policy,
            f"swarm member {self.member.name}",
            MemberCall(self.member, scope.run, MemberSeat(self.spec, progress), self._history()),
            self.input["input"],
            stream_step(scope, self.member.name, scope.key),
        )

    def perform(self) -> Transition:
        self.scope.check_interrupt()
        return self._decide()

    def _decide(self) -> Transition:
        """Attempt the member until it settles (the transition committing its outcome) or an attempt's
        child runs on the workers (the transition parking the step on it)."""
        outcome = self.attempts.settle()
        if isinstance(outcome, Delayed):
            return park_until(self.scope, outcome.until, still_open=self._still_open, what="swarm member step")
        if isinstance(outcome, str):
            return self._park(outcome)
        return self._after(outcome)

    def _history(self) -> tuple[Message, ...]:
        """The run's history for a member that opts in; else, on the Swarm's first turn, its session's."""
        if self.member.history:
            return run_history(self.scope)
        return session_history(self.scope) if self.input["n"] == 1 else ()

    def _still_open(self, state: FrameState) -> bool:
        """Whether the frame still expects this step's commit."""
        scope = self.scope
        return bool(state.checkpoint.data.get("active") == scope.key)  # type: ignore[attr-defined]

    def _park(self, child_id: str) -> Transition:
        """Commit the step as waiting for its child; a child ended by then is read as the step's
        next execution would read it (child_runs.park_on_child)."""
        scope = self.scope
        return park_on_child(
            scope,
            child_id,
            still_open=self._still_open,
            after=lambda _child, _child_id: self._decide(),
            what="swarm member step",
            seen=self.attempts.seen,
        )

    def _after(self, settled: Settled) -> Transition:
        """The transition of a settled member: a handoff, the Swarm's answer, or its failure."""
        scope = self.scope
        child, child_id = settled.child, settled.child_id
        if settled.error is not None:
            error = settled.error
            if isinstance(error, AssemblyStepTimeoutError):
                return scope.ending("failed", error)
            failure = MemberFailed(
                f"swarm member {self.member.name} (child run {child_id}) ended {child.outcome}: {describe_error(error)}"
            )
            return scope.ending("failed", failure)
        handoff = _handoff_of(child)
        record = self._record(settled, handoff)
        if handoff is None:
            # The one public answer: the final member's text, never an intermediate member's.
            scope.emit("text_delta", text=record["text"])
            return lambda state: MemberCommit(scope, self.spec, state).answered(record)

        def hand_off(state: FrameState) -> StepCommit:
            try:
                return MemberCommit(scope, self.spec, state).handed_off(record, handoff["to"], handoff["message"])
            except ToolError as refused:  # checked by the tool against the same progress; never refused here
                return scope.ending("failed", MemberFailed(f"swarm member {self.member.name}: {refused}"))(state)

        return hand_off

    def _record(self, settled: Settled, handoff: dict[str, str] | None) -> dict[str, Any]:
        """What the frame keeps of this execution: bounded, JSON, enough to rebuild its Step.

        A member that handed off keeps the handoff (its target and a bounded note) as its
        output, never its model's text: intermediate text stays out of the Swarm's result.
        Its usage is every attempt's.
        """
        child, attempts = settled.child, settled.attempts
        result = child.result
        structured = None
        if result is not None and result.structured_result is not None and handoff is None:
            value, _cut = bounded_output(result.structured_result.value)
            structured = {"schema_name": result.structured_result.schema_name, "value": value}
        text = ""
        if handoff is None:
            text, _cut = bounded_output(result.text if result is not None else (child.response or ""))
        kept = None if handoff is None else {"to": handoff["to"], "message": journey_excerpt(handoff["message"])}
        usage = Usage()
        for attempt in attempts:
            usage = usage + Usage.from_dict(attempt["usage"])
        return {
            "key": self.scope.key,
            "id": f"{self.member.name}-{self.input['n']}",
            "member": self.member.name,
            "agent_id": str(getattr(self.member.agent, "agent_id", self.member.name)),
            "status": "completed",
            "text": text,
            "structured": structured,
            "handoff": kept,
            "usage": usage.to_dict(),
            "started_at": attempts[0]["started_at"],
            "finished_at": attempts[-1]["finished_at"],
            "error": None,
            "attempts": attempts,
            "predecessors": list(self.input.get("predecessors") or ()),
            "child_run_id": settled.child_id,
        }


def _handoff_of(child: Run) -> dict[str, str] | None:
    """The handoff a member's run ended with (its handoff tool's ``EndsRun`` value), or None: it answered."""
    result = child.result
    ended = None if result is None else result.ended_by
    if not ended or ended.get("tool") != HANDOFF_TOOL_NAME:
        return None
    value = ended.get("value") or {}
    return {"to": str(value.get("to")), "message": str(value.get("message"))}


__all__ = ["MemberCall", "MemberFailed", "SwarmMemberStep"]
