"""One model turn of the agent loop (step key ``<frame>/turn-N/model``).

Execute: build the request, run ``before_model``, stream the provider (with
the spec's recovery: ``after_model_error`` replacements and retryable provider
errors, each announced by ``model_retry``; ``_model_call.py``), run
``after_model``. Then decide:
schedule the turn's tool calls, repair or accept a structured result, or
finish the run.
"""

from __future__ import annotations

from typing import Any

from lg_core.callbacks import run_chain
from lg_core.code_mode.catalog import Catalog
from lg_core.content import Text, ToolResult
from lg_core.engine._checkpoint import AgentCheckpoint
from lg_core.engine._code_mode_offer import code_mode_offer, program_holder, with_program_instructions
from lg_core.engine._frames import FrameState
from lg_core.engine._model_call import ModelCall
from lg_core.engine._step_kind import StepKind
from lg_core.engine._step_scope import StepScope, Transition, message_rows
from lg_core.engine._structured_results import (
    answers_to_final_calls,
    cut_off_before_answering,
    refuse_tool_work_in_repair,
    repair_instruction,
    submit_description,
    with_output,
)
from lg_core.engine._tool_admission import check_tool_calls, counted_calls, loop_repeats, scheduled_calls
from lg_core.engine._turn_keys import MODEL, next_turn
from lg_core.errors import CancelledError, OutputLimitError, StructuredResultError
from lg_core.messages import Message
from lg_core.models.request import ModelRequest, ModelResponse, ToolSpecification
from lg_core.result_schema import (
    ResultSchema,
    StructuredResult,
    check_tools_accepted,
    parse_json_text,
    result_strategy,
)
from lg_core.run_result import RunResult
from lg_core.usage import Usage


class ModelTurn:
    def __init__(self, scope: StepScope) -> None:
        self.scope = scope
        self.model_call = ModelCall(scope)
        self.idempotent_tools: frozenset[str] = frozenset()  # tools not declared at_most_once
        self.repairing = False  # this turn is a structured result's repair turn
        self.interjected: list[Message] = []
        self.interjection_seqs: list[int] = []
        self.code_catalog: Catalog | None = None  # in code mode, the tools programs call (_code_mode_offer)

    @property
    def partial_text(self) -> str:
        """The text the current model call has streamed so far (a partial run's response)."""
        return self.model_call.partial_text

    @property
    def calls_made(self) -> int:
        """How many model calls this turn made (retries included)."""
        return self.model_call.calls_made

    # -- execute -------------------------------------------------------------------

    def perform(self) -> Transition:
        scope = self.scope
        checkpoint = scope.frame.checkpoint
        scope.build_context(checkpoint)
        scope.check_interrupt()
        agent_cls = scope.agent_class
        max_turns = agent_cls.limits["max_turns"]
        if checkpoint.turn >= max_turns:
            raise OutputLimitError(
                f"{agent_cls.__name__} used all {max_turns} model turns without finishing; "
                f"raise limits = {{'max_turns': ...}} on the agent if the task needs more"
            )
        model = scope.engine.resolve_model(scope.run)
        # Built but not opened: a turn lists tools by the sandbox's policy (Filesystem offers its
        # mutation tools only when it is writable) and runs none of them; tool calls open it.
        scope.build_resources()
        agent = scope.build_agent(model)
        self._take_interjections()
        spec = agent_cls.result_spec()
        strategy = result_strategy(spec, model)
        self.repairing = checkpoint.repairing and spec is not None
        specifications, exclusive = ((), {}) if self.repairing else self._offered_tools(agent, model)
        request = self._request(agent, model, specifications, spec, strategy, checkpoint)
        decision = run_chain(
            agent,
            "before_model",
            {"request": request, "turn": checkpoint.turn, "parent_operation_id": None},
            context=scope.context,
        )
        if decision.cancelled:
            raise CancelledError(decision.reason or "a before_model callback cancelled the invocation")
        request = decision.value["request"]
        if scope.attempt > 1:
            scope.emit(
                "model_retry",
                attempt=scope.attempt,
                partial_text=True,
                reason="step re-executed after a crash",
                delay=0.0,
            )
        response = self.model_call.stream(agent, model, request, checkpoint)
        decision = run_chain(
            agent,
            "after_model",
            {"request": request, "response": response, "turn": checkpoint.turn},
            context=scope.context,
        )
        if decision.cancelled:
            raise CancelledError(decision.reason or "an after_model callback cancelled the invocation")
        response = decision.value["response"]
        return self._decide(agent, response, spec, strategy, exclusive)

    def _offered_tools(self, agent: Any, model: Any) -> tuple[tuple[ToolSpecification, ...], dict[str, bool]]:
        """The agent's tools for this turn, as the model sees them, and which of them are exclusive.

        Not asked in a structured result's repair turn: the spec allows it one repair
        attempt, so it is offered only the way to answer, never more tool work.
        """
        scope = self.scope
        registry = agent.tool_registry(scope.binding(agent, model))
        try:
            specifications, self.code_catalog = code_mode_offer(scope.agent_class, registry.specifications(), registry)
            check_tools_accepted(model, (tool.name for tool in specifications), scope.agent_class.__qualname__)
            exclusive = {tool.tool_name: bool(tool.exclusive) for tool in registry}
            # Marked on their step rows, so a worker's claim of such a call need not be durable.
            self.idempotent_tools = frozenset(tool.tool_name for tool in registry if not tool.at_most_once)
        finally:
            registry.close()
        return specifications, exclusive

    def _take_interjections(self) -> None:
        """User messages interjected since the last turn join the conversation here."""
        if not self.scope.engine.interjections_may_be_pending(self.scope.run.id):
            return
        for seq, data, metadata in self._pending_interjections():
            message = Message.from_dict(data)
            self.interjected.append(message)
            self.interjection_seqs.append(seq)
            self.scope.emit("interjection", seq=seq, message=message, metadata=metadata)

    def _rows(self, state: FrameState, checkpoint: AgentCheckpoint, messages: list[Message]) -> list[Any]:
        """Rows for this turn's interjections and ``messages``; advances the message count."""
        rows = message_rows(state, [*self.interjected, *messages])
        checkpoint.message_count += len(rows)
        return rows

    def _request(
        self,
        agent: Any,
        model: Any,
        tools: tuple[ToolSpecification, ...],
        spec: ResultSchema | None,
        strategy: str | None,
        checkpoint: AgentCheckpoint,
    ) -> ModelRequest:
        scope = self.scope
        invocation = scope.run.invocation
        output_schema = None
        # (result_strategy chooses a strategy only for a spec)
        if spec is not None and strategy == "provider":
            output_schema = {"name": spec.name, "description": spec.description, "schema": spec.schema}
        if spec is not None and strategy == "tool":
            tools = tools + (
                ToolSpecification(spec.tool_name(), spec.description or submit_description(spec.name), spec.schema),
            )
        return ModelRequest(
            messages=scope.frame.messages + tuple(self.interjected),
            system=with_program_instructions(agent.render_system_prompt(), self.code_catalog),
            tools=tools,
            settings=dict(invocation.settings),
            output_schema=output_schema,
            cancellation_token=scope.run.cancellation_token,
            deadline=invocation.deadline_at,
            metadata={
                "run_id": scope.run.id,
                "frame": scope.frame.path,
                "turn": checkpoint.turn,
                "sequence": checkpoint.model_calls,
            },
        )

    # -- decide --------------------------------------------------------------------

    def _decide(
        self,
        agent: Any,
        response: ModelResponse,
        spec: ResultSchema | None,
        strategy: str | None,
        exclusive: dict[str, bool],
    ) -> Transition:
        tool_uses = response.message.tool_uses
        if self.repairing and spec is not None:
            refuse_tool_work_in_repair(tool_uses, spec, strategy)
        if strategy == "tool" and spec is not None:
            terminal = [use for use in tool_uses if use.name == spec.tool_name()]
            if terminal:
                return self._structured(agent, response, spec, strategy, terminal[0].input, terminal[0].id)
        if tool_uses:
            return self._schedule_tools(response, exclusive)
        cut_off = response.stop_reason == "max_tokens"
        if strategy == "provider" and spec is not None:
            value, problem = parse_json_text(response.message.text)
            if cut_off and (problem or spec.validate(value)):
                raise cut_off_before_answering(spec)
            return self._structured(agent, response, spec, strategy, value, None, problem)
        if strategy == "tool" and spec is not None:
            if cut_off:
                raise cut_off_before_answering(spec)
            # Not taken from the text, even when it holds a valid object: with this strategy the
            # result comes only through the submit tool (the spec: "that exact path").
            problem = f"it answered in text instead of calling the tool {spec.tool_name()!r}"
            return self._repair(response, spec, strategy, [problem], None)
        if cut_off and not response.message.text.strip():
            raise cut_off_before_answering(None)
        return self._finish(agent, response, None)

    def _structured(
        self,
        agent: Any,
        response: ModelResponse,
        spec: ResultSchema,
        strategy: str,
        value: Any,
        tool_use_id: str | None,
        problem: str | None = None,
    ) -> Transition:
        problems = [problem] if problem else spec.validate(value)
        if problems:
            return self._repair(response, spec, strategy, problems, tool_use_id)
        structured = StructuredResult(schema_name=spec.name, value=value)
        self.scope.built_context.submit_structured_result(structured)
        return self._finish(agent, response, structured, spec.output(value), submitted_by=tool_use_id)

    def _repair(
        self, response: ModelResponse, spec: ResultSchema, strategy: str, problems: list[str], tool_use_id: str | None
    ) -> Transition:
        scope = self.scope
        if scope.frame.checkpoint.repairs >= 1:
            raise StructuredResultError(
                f"the model's structured result for {spec.name!r} was invalid twice: {'; '.join(problems[:3])}",
                schema_name=spec.name,
                validation_errors=problems,
            )
        scope.emit("structured_result_repair", schema_name=spec.name, validation_errors=list(problems))
        instruction = repair_instruction(spec, strategy, problems)
        followups: list[Message] = [response.message]
        if tool_use_id is not None:
            followups.append(
                Message(
                    role="tool",
                    content=[ToolResult(tool_use_id=tool_use_id, content=(Text(text=instruction),), status="error")],
                )
            )
            for use in response.message.tool_uses:
                if use.id != tool_use_id:
                    followups[-1] = Message(
                        role="tool",
                        content=list(followups[-1].content)
                        + [
                            ToolResult(
                                tool_use_id=use.id,
                                content=(Text(text="Not run: the result submission was invalid."),),
                                status="error",
                            )
                        ],
                    )
        else:
            followups.append(Message(role="user", content=instruction))
        calls = self.calls_made

        def transition(state: FrameState) -> Any:
            checkpoint = self._advanced(state, response, calls)
            checkpoint.repairs += 1
            checkpoint.repairing = True
            checkpoint.turn += 1
            rows = self._rows(state, checkpoint, followups)
            repairing = next_turn(state, checkpoint.turn)
            step_result = {"stop_reason": response.stop_reason, "repair": True}
            if self.interjection_seqs:  # the rejected answer is no reply: the repairing turn's is
                step_result["reply_in"] = repairing.key
            return scope.commit_for(
                state,
                checkpoint,
                step_result=step_result,
                messages=rows,
                consumed_interjections=self.interjection_seqs,
                new_steps=[repairing],
            )

        return transition

    def _schedule_tools(self, response: ModelResponse, exclusive: dict[str, bool]) -> Transition:
        scope = self.scope
        tool_uses = response.message.tool_uses
        check_tool_calls(scope.agent_class, tool_uses, scope.frame.checkpoint.tool_calls_total)
        calls = self.calls_made
        holder = program_holder(scope, tool_uses)

        def transition(state: FrameState) -> Any:
            checkpoint = self._advanced(state, response, calls)
            checkpoint.phase = "tools"
            checkpoint.tool_calls_total += counted_calls(scope.agent_class, tool_uses)
            rows = self._rows(state, checkpoint, [response.message])
            repeats = loop_repeats(scope.agent_class, state, tool_uses)
            checkpoint.pending, new_steps = scheduled_calls(
                state,
                checkpoint.turn,
                tool_uses,
                exclusive,
                self.idempotent_tools,
                repeats,
                code_mode=scope.agent_class.code_mode_options() is not None,
                program_holder=holder,
            )
            return scope.commit_for(
                state,
                checkpoint,
                step_result={"stop_reason": response.stop_reason, "tool_calls": len(tool_uses)},
                messages=rows,
                consumed_interjections=self.interjection_seqs,
                new_steps=new_steps,
            )

        return transition

    def _finish(
        self,
        agent: Any,
        response: ModelResponse,
        structured: StructuredResult | None,
        output: Any = None,
        submitted_by: str | None = None,
    ) -> Transition:
        scope = self.scope
        calls = self.calls_made

        def transition(state: FrameState) -> Any:
            checkpoint = self._advanced(state, response, calls)
            if self._late_interjections():
                return self._continue_for_interjection(state, checkpoint, response)
            checkpoint.phase = "done"
            rows = self._rows(
                state, checkpoint, [response.message, *answers_to_final_calls(response.message, submitted_by)]
            )
            result = RunResult(
                message=response.message,
                stop_reason=response.stop_reason,
                usage=Usage.from_dict(checkpoint.usage),
                messages=state.messages + tuple(message for _seq, message in rows),
                state=scope.built_context.state.to_dict(),
                structured_result=structured,
                output_value=output,
            )
            decision = run_chain(agent, "after_invocation", {"result": result}, context=scope.context)
            if decision.cancelled:
                return scope.ending(
                    "cancelled",
                    CancelledError(decision.reason or "an after_invocation callback cancelled result delivery"),
                )(state)
            if self._late_interjections():  # one arrived while the callbacks ran (a callback may add it)
                return self._continue_for_interjection(state, self._advanced(state, response, calls), response)
            result = decision.value["result"]
            if decision.replaced:  # output follows the structured result delivered, as a stored run's does
                result = with_output(result, scope.agent_class.result_spec())
            return scope.completion(state, checkpoint, result, rows, self.interjection_seqs)

        return transition

    def _late_interjections(self) -> bool:
        """Did a user message arrive while this turn ran? Then the run is not done yet."""
        if not self.scope.engine.interjections_may_be_pending(self.scope.run.id):
            return False
        taken = set(self.interjection_seqs)
        return any(seq not in taken for seq, _m, _meta in self._pending_interjections())

    def _pending_interjections(self) -> list[Any]:
        """The run's pending interjections, read through a store outage (Engine.patiently)."""
        store, run_id = self.scope.engine.store, self.scope.run.id
        return self.scope.patiently(lambda: store.pending_interjections(run_id))

    def _continue_for_interjection(
        self, state: FrameState, checkpoint: AgentCheckpoint, response: ModelResponse
    ) -> Any:
        """Keep the run going for a user message that arrived while this turn ran.

        The answer stays in the conversation; a result submitted through the
        result tool gets its tool result, so the next request never holds a tool
        call without one (providers reject that).
        """
        checkpoint.turn += 1
        followups = [response.message]
        if response.message.tool_uses:
            note = (Text(text="Received. A new user message arrived before the run finished; answer it."),)
            followups.append(
                Message(
                    role="tool",
                    content=[
                        ToolResult(tool_use_id=use.id, content=note, status="success")
                        for use in response.message.tool_uses
                    ],
                )
            )
        rows = self._rows(state, checkpoint, followups)
        return self.scope.commit_for(
            state,
            checkpoint,
            step_result={"stop_reason": response.stop_reason, "continued_for_interjection": True},
            messages=rows,
            consumed_interjections=self.interjection_seqs,
            new_steps=[next_turn(state, checkpoint.turn)],
        )

    def _advanced(self, state: FrameState, response: ModelResponse, calls: int) -> AgentCheckpoint:
        """The checkpoint after this turn's model calls, before the branch's own changes."""
        checkpoint = state.checkpoint.copy()
        checkpoint.model_calls += calls
        checkpoint.repairing = False  # a repair turn is one turn: whatever follows it is not
        self.scope.add_step_usage(checkpoint)  # the response's usage, recorded as it arrived
        checkpoint.last_text = response.message.text or checkpoint.last_text
        if self.scope.context is not None:
            checkpoint.state = self.scope.state_for(state)
        return checkpoint


MODEL_TURN = StepKind(
    name=MODEL,
    key_shape="<frame path>/turn-<N>/model",
    task_name="lg.model_turn",
    queue="lg.model",
    body=ModelTurn,
)


__all__ = ["MODEL_TURN", "ModelTurn"]
