"""What a tool whose call runs *on its step* works with: the step, and how the call's result is committed.

Most tools are called and return. A tool that runs another Agent or assembly
(lg_core.assemblies.assembly_tools) runs it as a child run of the parent run,
which on a worker outlives the call: the tool-call step starts the child and
parks (commits ``waiting``, holding no thread) until the child's ending wakes it.
Such a tool defines ``call_on_step(step, prepared)``; the tool-call step
(lg_core.engine._tool_call) calls it instead of ``call`` with a :class:`ToolStep`,
and it returns either the call's outcome or the transition that parks the step.

A parked step is executed again when the child ends. ``resumes_on_step(scope)`` tells
that execution apart from a first one (the child the step started exists): it goes on
with the call an earlier execution announced (``tool_execution_start``) and the
agent's ``before_tool`` callbacks admitted, so neither happens twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lg_core.content import ToolUse

if TYPE_CHECKING:
    from lg_core.engine._frames import FrameState
    from lg_core.engine._step_scope import StepScope, Transition
    from lg_core.tool import ToolOutcome


@dataclass(frozen=True, slots=True)
class ToolStep:
    """One tool-call step as its tool sees it.

    ``record(outcome)`` is the transition committing ``outcome`` as the call's
    result (after the agent's ``after_tool`` callbacks), the one a returned
    outcome gets; ``still_open(state)`` says whether the frame still expects
    this call's commit (a parked step's transition checks it like any other).
    """

    scope: StepScope
    use: ToolUse
    record: Callable[[ToolOutcome], Transition]

    def still_open(self, state: FrameState) -> bool:
        entry = next((p for p in state.checkpoint.pending if p.key == self.scope.key), None)
        return entry is not None and entry.status != "done"


def runs_on_step(tool: Any) -> bool:
    """Does ``tool`` run its calls on their step (``call_on_step``) rather than through ``call``?"""
    return callable(getattr(tool, "call_on_step", None))


def resumes_on_step(tool: Any, scope: StepScope) -> bool:
    """Does this execution of ``scope`` go on with a call of ``tool`` an earlier one started?"""
    resumes = getattr(tool, "resumes_on_step", None)
    return runs_on_step(tool) and callable(resumes) and bool(resumes(scope))


__all__ = ["ToolStep", "resumes_on_step", "runs_on_step"]
