"""One tool call of the agent loop (step key ``<frame>/turn-N/tool/<call id>``).

Execute: find the tool (an unknown name is a model-visible error), validate
the input (and convert it for an ``Input`` model), run ``before_tool``, call
it, run ``after_tool``, bound the output.
An ``at_most_once`` tool is claimed first and durably marked as started right
before its code runs; a re-attempt that finds the mark reports "outcome
unknown" instead of calling it (lg_core.engine._at_most_once).
Commit: record the result; the call that completes the turn (fan-in, decided
under the frame's optimistic version) appends one tool message with every
result in call order (with the tool-loop warnings, counted there in call order)
and schedules the next model turn, or, when a call of the turn returned
``EndsRun`` (lg_core.tool), completes the run with that value as its result's
``ended_by``. Parallel calls in one
process commit in turn under their frame's lock (lg_core.engine._frame_locks);
calls in other processes may still lose the frame's race, and their commit is
marked ``contended`` so that losing costs PostgreSQL no connection. Exclusive tools of a
turn run one after another: each one's commit schedules the next.
A tool that runs on its step (an Agent or assembly as a tool, lg_core.engine.tool_steps)
may answer with the transition parking the step while its child run runs on the workers;
the child's ending wakes the step, which executes again and records the child's answer.
"""

from __future__ import annotations

import dataclasses
import re
import traceback
from typing import Any

from lg_core import content as content_mod
from lg_core.callbacks import run_chain
from lg_core.code_mode.catalog import python_name
from lg_core.code_mode.options import program_tool_names
from lg_core.content import Text, ToolResult, ToolUse
from lg_core.engine._at_most_once import start_guard
from lg_core.engine._frames import FrameState
from lg_core.engine._step_kind import StepKind
from lg_core.engine._step_scope import StaleStep, StepScope, Transition, message_rows
from lg_core.engine._tool_execution import execute_tool
from lg_core.engine._turn_keys import TOOL, next_turn
from lg_core.engine.codec import error_to_dict
from lg_core.errors import CancelledError
from lg_core.messages import Message
from lg_core.result_schema import result_strategy
from lg_core.run_result import RunResult
from lg_core.sandbox.run_resources import opened
from lg_core.store import NewStep, StepCommit
from lg_core.tool import Tool, ToolOutcome
from lg_core.tool_loops import observe
from lg_core.truncation import truncate_middle
from lg_core.usage import Usage

OUTCOME_UNKNOWN = (
    "The outcome of this tool call is unknown: the process running it stopped before it "
    "reported back, and the tool is marked at_most_once, so it was not run again. "
    "Check the result another way before retrying it."
)


class ToolCall:
    partial_text = ""  # a tool call streams no text (StepBody)

    def __init__(self, scope: StepScope) -> None:
        self.scope = scope
        self.agent: Any = None  # the run-scoped Agent this call executed with (perform)
        self.call: dict[str, Any] = dict(scope.input or {})
        self.tool_use = ToolUse(
            id=self.call["id"],
            name=self.call["name"],
            input=self.call.get("input") or {},
            input_error=self.call.get("input_error"),
        )

    # -- execute -------------------------------------------------------------------

    def perform(self) -> Transition:
        scope = self.scope
        scope.build_context(scope.frame.checkpoint)
        scope.check_interrupt()
        model = scope.engine.resolve_model(scope.run)
        # Workspace, then sandbox, opened for this call and closed (sandbox first) however it ends.
        with opened(scope.build_resources(), scope.run):
            agent = self.agent = scope.build_agent(model)
            idempotency_key = f"{scope.run.id}/{scope.key}"
            registry = agent.tool_registry(scope.binding(agent, model, idempotency_key))
            try:
                outcome = self._execute(agent, registry, model)
            finally:
                registry.close()
        return self._record(outcome) if isinstance(outcome, ToolOutcome) else outcome

    def _execute(self, agent: Any, registry: Any, model: Any) -> ToolOutcome | Transition:
        """The call's outcome, or, for a tool running a child run on the workers, the transition
        parking this step until the child ends (lg_core.engine.tool_steps)."""
        scope, use = self.scope, self.tool_use
        policy = scope.agent_class._tool_loop_policy
        if policy is not None and policy.watches(use.name):
            # The terminating repeat stops the run here, before the tool body runs again. Its number
            # was stored when the turn scheduled it, counting identical siblings of this batch that
            # may not have committed yet (lg_core.tool_loops); a call stored without it uses the counts.
            repeats = self.call.get("loop_repeats")
            if repeats is None:
                repeats = policy.repeats_so_far(scope.frame.checkpoint.tool_loops, use.name, use.input)
            policy.check_may_run(repeats, use.name)
        if use.name not in registry:  # the submit tool is looked up only for this message
            error = registry.unknown_tool(use.name, also_offered=_submit_tools(scope.agent_class, model))
            return ToolOutcome.failure(str(error), "unknown_tool", error)
        options = scope.agent_class.code_mode_options()
        if options is not None and use.name in program_tool_names(options, registry):
            return ToolOutcome.failure(
                f"The tool {use.name!r} is available only inside code-mode programs: call "
                f"tools.{python_name(use.name)}(...) in a program you run with exec.",
                "unknown_tool",
            )
        tool: Tool = registry.fetch(use.name)
        entering = None
        if tool.at_most_once:
            entering = start_guard(scope)  # what marks the tool started, or None when it may have run before
            if entering is None:
                return ToolOutcome.failure(OUTCOME_UNKNOWN, "outcome_unknown")
        return execute_tool(
            scope,
            agent,
            tool,
            use,
            operation_id=scope.key,
            parent_operation_id=scope.frame.id,
            entering=entering,
            record=self._record,
        )

    # -- record --------------------------------------------------------------------

    def _record(self, outcome: ToolOutcome) -> Transition:
        scope, use = self.scope, self.tool_use
        outcome = self._bounded(outcome)
        block = ToolResult(tool_use_id=use.id, content=outcome.content, status=outcome.status)
        if outcome.error_kind == "outcome_unknown":
            scope.emit("tool_outcome_unknown", id=use.id, name=use.name, step=scope.key)
        self._emit_stop(outcome)
        diagnostics = self._diagnostics(outcome)
        brokered_calls, extra = self._brokered_calls(), self._step_result_extra()
        # Nothing came back to compare (outcome unknown), or a result that says only "not yet" (a subagent
        # wait's still_working, marked loop_neutral): neither is a repeated failure to make progress.
        counted = outcome.error_kind != "outcome_unknown" and not extra.get("loop_neutral")

        def transition(state: FrameState) -> Any:
            checkpoint = state.checkpoint.copy()
            checkpoint.state = scope.state_for(state)
            result: dict[str, Any] = {
                "tool_result": content_mod.serialize(block),
                "error_kind": outcome.error_kind,
                **extra,
            }
            ending = {"tool": use.name, "value": outcome.value} if outcome.ends_run and outcome.ok else None
            if ending is not None:
                result["ends_run"] = ending
            scope.add_step_usage(checkpoint)  # what the tool and its callbacks recorded
            checkpoint.tool_calls_total += brokered_calls  # a code-mode program's calls share the agent's limit
            entry = next((p for p in checkpoint.pending if p.key == scope.key), None)
            if entry is None or entry.status == "done":
                raise StaleStep(f"tool call {scope.key} is already done")
            entry.status = "done"
            siblings_running = any(p.status == "scheduled" for p in checkpoint.pending)
            new_steps: list[NewStep] = []
            if entry.exclusive:
                waiting = next((p for p in checkpoint.pending if p.status == "waiting"), None)
                if waiting is not None:
                    waiting.status, call, waiting.input = "scheduled", waiting.input, None
                    new_steps.append(NewStep(key=waiting.key, frame_id=state.id, kind=TOOL, input=call))
            messages: list[Message] = []
            if all(p.status == "done" for p in checkpoint.pending):
                turn_message, turn_ending = self._turn_results(checkpoint, block, counted, ending)
                messages.append(turn_message)
                checkpoint.pending, checkpoint.phase = [], "model"
                checkpoint.message_count += 1
                if turn_ending is not None:
                    return self._ended_by_tool(state, checkpoint, messages, turn_ending)
                checkpoint.turn += 1
                new_steps.append(next_turn(state, checkpoint.turn))
            return scope.commit_for(
                state,
                checkpoint,
                step_status="unknown" if outcome.error_kind == "outcome_unknown" else "succeeded",
                step_result=result,
                step_error=diagnostics,
                messages=message_rows(state, messages),
                new_steps=new_steps,
                contended=siblings_running,
            )

        return transition

    def _emit_stop(self, outcome: ToolOutcome) -> None:
        use = self.tool_use
        self.scope.emit(
            "tool_execution_stop",
            id=use.id,
            name=use.name,
            status=outcome.status,
            output=outcome.text,
            error_kind=outcome.error_kind,
        )

    def _brokered_calls(self) -> int:
        """The tool calls a code-mode program made through this step (none for a direct call)."""
        return 0

    def _step_result_extra(self) -> dict[str, Any]:
        """What the step's stored result holds besides the tool result (a code-mode program's holder)."""
        return {}

    def _ended_by_tool(
        self, state: FrameState, checkpoint: Any, messages: list[Message], ending: dict[str, Any]
    ) -> StepCommit:
        """The commit completing the run because a call of this turn returned ``EndsRun``: the turn's
        results join the conversation (every call answered), and the result carries the ending value."""
        scope = self.scope
        checkpoint.phase = "done"
        rows = message_rows(state, messages)
        last = next((message for message in reversed(state.messages) if message.role == "assistant"), None)
        result = RunResult(
            message=last,
            stop_reason="tool_use",
            usage=Usage.from_dict(checkpoint.usage),
            messages=state.messages + tuple(message for _seq, message in rows),
            state=scope.built_context.state.to_dict(),
            ended_by=ending,
        )
        # Delivered as a model turn's answer is: after_invocation may still cancel or replace it.
        decision = run_chain(self.agent, "after_invocation", {"result": result}, context=scope.context)
        if decision.cancelled:
            reason = decision.reason or "an after_invocation callback cancelled result delivery"
            return scope.ending("cancelled", CancelledError(reason))(state)
        return scope.completion(state, checkpoint, decision.value["result"], rows, [])

    def _turn_results(
        self, checkpoint: Any, own: ToolResult, own_counted: bool, own_ending: dict[str, Any] | None
    ) -> tuple[Message, dict[str, Any] | None]:
        """One tool message with every result of the turn, in call order, with its loop warnings,
        and the first ending value (``EndsRun``) a call of the turn returned, in call order.

        The tool-loop counts in ``checkpoint`` are updated here, once for the
        whole turn and in call order, by the call that completes it: commit order
        differs from run to run, and the repeats were numbered in call order when
        the turn was scheduled (lg_core.tool_loops).
        """
        pending = checkpoint.pending
        results = {own.tool_use_id: (self.call, own, own_counted)}
        endings = {own.tool_use_id: own_ending}
        if len(pending) > 1:
            # The turn's tool prefix: the key less the call id, which may itself hold a "/".
            prefix = self.scope.key[: len(self.scope.key) - len(own.tool_use_id)]
            store, run_id = self.scope.engine.store, self.scope.run.id
            for step in self.scope.patiently(lambda: store.load_steps(run_id, prefix=prefix)):
                if step.result and step.key != self.scope.key:
                    block = content_mod.from_dict(step.result["tool_result"])
                    counted = step.result.get("error_kind") != "outcome_unknown" and not step.result.get("loop_neutral")
                    results[block.tool_use_id] = (step.input or {}, block, counted)
                    endings[block.tool_use_id] = step.result.get("ends_run")
        blocks = []
        for entry in pending:
            call, block, counted = results[entry.id]
            blocks.append(self._with_loop_warning(block, call, checkpoint) if counted else block)
        ending = next((endings[entry.id] for entry in pending if endings.get(entry.id) is not None), None)
        return Message.of_blocks("tool", blocks), ending

    def _with_loop_warning(self, block: ToolResult, call: dict[str, Any], checkpoint: Any) -> ToolResult:
        """``block`` (the result of ``call``) plus the warning its repeat count calls for;
        counts it in ``checkpoint``."""
        policy, name = self.scope.agent_class._tool_loop_policy, call.get("name", "")
        if policy is None or not policy.watches(name):
            return block
        checkpoint.tool_loops, count = observe(
            checkpoint.tool_loops, name, call.get("input") or {}, content_mod.serialize(block)
        )
        warning = policy.warning(count, name)
        if warning is None:
            return block
        return ToolResult(
            tool_use_id=block.tool_use_id, content=(*block.content, Text(text=warning)), status=block.status
        )

    def _bounded(self, outcome: ToolOutcome) -> ToolOutcome:
        """``outcome`` with over-long text blocks truncated (itself when none is)."""
        limit = self.scope.agent_class.limits["max_tool_output_tokens"]
        content = tuple(_bounded_block(block, limit) for block in outcome.content)
        if all(new is old for new, old in zip(content, outcome.content, strict=True)):
            return outcome
        return dataclasses.replace(outcome, content=content)

    def _diagnostics(self, outcome: ToolOutcome) -> dict[str, Any] | None:
        if outcome.error is None or outcome.error_kind != "unexpected":
            return None
        capture = self.scope.agent_class.capture_diagnostics is True
        data = error_to_dict(outcome.error, include_message=capture)
        if capture:
            data["traceback"] = "".join(traceback.format_exception(outcome.error))[-8000:]
        self.scope.run.record_diagnostic(
            {"kind": "tool_error", "step": self.scope.key, "tool": self.tool_use.name, **data}, outcome.error
        )
        return data


def _bounded_block(block: Any, limit: int) -> Any:
    """A Text block cut to ``limit`` tokens; any other block, or a text within it, unchanged (the same object)."""
    if not isinstance(block, Text):
        return block
    text = truncate_middle(block.text, limit)
    return block if text == block.text else Text(text=text)


def _submit_tools(agent_class: Any, model: Any) -> tuple[str, ...]:
    """The result schema's submit tool, when the model was offered one (the terminal-tool strategy)."""
    spec = agent_class.result_spec()
    return (spec.tool_name(),) if spec is not None and result_strategy(spec, model) == "tool" else ()


def _has_running_siblings(scope: StepScope) -> bool:
    """Are other calls of this call's turn (parallel, not exclusive) maybe committing now?"""
    return sum(1 for p in scope.frame.checkpoint.pending if p.status == "scheduled") > 1


# A tool name as the Tool class allows it; a model's call may name anything, which monitoring does not repeat.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _tool_name(step_input: dict[str, Any] | None) -> str:
    """The called tool's name, for dashboards; ``?`` for a name no tool could have."""
    name = (step_input or {}).get("name")
    return name if isinstance(name, str) and _TOOL_NAME.fullmatch(name) else "?"


def tool_call_body(scope: StepScope) -> Any:
    """The body of one tool call: the agent class's own for a call it handles itself (a subagent
    control tool, whose result is the manager's ledger in the frame's checkpoint), else ``ToolCall``."""
    own = getattr(scope.agent_class, "tool_step_body", None)
    body = None if own is None else own(scope)
    return ToolCall(scope) if body is None else body


TOOL_CALL = StepKind(
    name=TOOL,
    key_shape="<frame path>/turn-<N>/tool/<call id>",
    task_name="lg.tool_call",
    queue="lg.tools",
    body=tool_call_body,
    takes_input=True,
    has_running_siblings=_has_running_siblings,
    label=_tool_name,
)


__all__ = ["OUTCOME_UNKNOWN", "TOOL_CALL", "ToolCall"]
