"""Running one tool: the path every tool call takes, whether the model or a code-mode program made it.

The tool-execution start event, the input's validation against the tool's
schema (and its conversion for an ``Input`` model), the agent's ``before_tool``
callbacks (which may refuse the call: permission checks and approvals live
there or in the tool's own ``call``), the call itself, and ``after_tool``
(which may replace the result). A direct call's step (lg_core.engine._tool_call)
and the code-mode broker's dispatch (lg_core.engine._code_exec) both run it,
so a tool behaves the same whichever way it was reached.

A tool that runs on its step (lg_core.engine.tool_steps: an Agent or assembly
called as a tool) is handed the step when the direct call's step passes
``record``; it may return the transition parking the step instead of an outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from lg_core.callbacks import run_chain
from lg_core.content import ToolUse
from lg_core.engine.tool_steps import ToolStep, resumes_on_step, runs_on_step
from lg_core.tool import Tool, ToolOutcome, success_outcome

if TYPE_CHECKING:
    from lg_core.engine._step_scope import Transition


@overload
def execute_tool(
    scope: Any,
    agent: Any,
    tool: Tool,
    use: ToolUse,
    *,
    operation_id: str,
    parent_operation_id: str,
    entering: Any = None,
    record: None = None,
) -> ToolOutcome: ...


@overload
def execute_tool(
    scope: Any,
    agent: Any,
    tool: Tool,
    use: ToolUse,
    *,
    operation_id: str,
    parent_operation_id: str,
    entering: Any = None,
    record: Callable[[ToolOutcome], Transition],
) -> ToolOutcome | Transition: ...


def execute_tool(
    scope: Any,
    agent: Any,
    tool: Tool,
    use: ToolUse,
    *,
    operation_id: str,
    parent_operation_id: str,
    entering: Any = None,
    record: Callable[[ToolOutcome], Transition] | None = None,
) -> ToolOutcome | Transition:
    """Run ``use`` with ``tool`` on ``scope``'s step; failures the model may read become failed outcomes.

    With ``record`` (the step's commit of an outcome), a tool that runs on its step gets the
    step, and may answer with the transition parking it (lg_core.engine.tool_steps); a step woken
    after parking goes on with its call, neither announced nor admitted (``before_tool``) again."""
    resumed = record is not None and resumes_on_step(tool, scope)
    if not resumed:
        scope.emit("tool_execution_start", id=use.id, name=use.name, input=dict(use.input))
    problems = [use.input_error] if use.input_error else tool.validate(use.input)
    if problems:
        return ToolOutcome.failure(f"Invalid input for tool {use.name!r}: " + "; ".join(problems[:5]), "validation")
    prepared = tool.prepare(use.input)  # an Input model's own checks are validation too
    if isinstance(prepared, ToolOutcome):
        return prepared
    payload = {"tool_use": use, "tool": tool, "operation_id": operation_id, "parent_operation_id": parent_operation_id}
    decision = run_chain(agent, "before_tool", payload, context=scope.context) if not resumed else None
    if decision is not None and decision.cancelled:
        return ToolOutcome.failure(
            decision.reason or f"The call to {use.name!r} was not allowed.", "cancelled_by_callback"
        )

    def after_tool(outcome: ToolOutcome) -> ToolOutcome:
        decision = run_chain(agent, "after_tool", {**payload, "result": outcome}, context=scope.context)
        return as_outcome(decision.value["result"]) if decision.replaced else outcome

    if record is not None and runs_on_step(tool):
        tool.context = scope.context
        step = ToolStep(scope, use, lambda outcome: record(after_tool(outcome)))
        answer = tool.call_on_step(step, prepared)  # type: ignore[attr-defined]
        return after_tool(answer) if isinstance(answer, ToolOutcome) else answer
    return after_tool(tool.execute_prepared(prepared, scope.context, entering=entering))


def as_outcome(value: Any) -> ToolOutcome:
    """An ``after_tool`` callback's replacement result as an outcome."""
    return value if isinstance(value, ToolOutcome) else success_outcome(value)


__all__ = ["as_outcome", "execute_tool"]
