"""An Agent, Workflow, Swarm or Graph offered to a model as one ordinary tool, run as a child run.

``agent_as_tool``/``assembly_as_tool`` (lg_core.subagents.declarations) become an
:class:`AssemblyTool` subclass in the declaring Agent's tools. The model sees its
name, its description and :data:`INPUT_SCHEMA` (one ``message``). A call made
by the model runs on its tool-call step (lg_core.engine.tool_steps) as a child run
of the parent run (lg_core.assemblies.child_runs): its id is derived from the
parent run and the step's key, so an attempt executed again finds the child the
first one started. Locally the child runs nested on the step's thread; on a worker
the step parks until the child's ending wakes it, then commits the child's answer.

The child receives the parent's working state as its invocation ``context``; with
``preserve_context`` it also receives the conversation of the tool's previous call
in this run (its calls are ``exclusive``, so they run one after another). The
child's usage is added to the step's, so the parent's result counts it. A child
that fails or is cancelled answers the call with an error result the model reads;
the parent's own cancel or deadline, which reached the child, stops the parent too.

Called another way (a code-mode program, ``Tool.execute``) the tool asks the
assembly in the calling process, as an ordinary nested ``ask``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, cast

from lg_core.assemblies.agent_overrides import agent_with_overrides, override_attribute
from lg_core.assemblies.child_runs import child_run_id, ended_child, park_on_child, start_or_find_child
from lg_core.assemblies.trajectory import describe_error
from lg_core.errors import RunNotFoundError, ToolError
from lg_core.messages import Message
from lg_core.tool import Tool, ToolOutcome, success_outcome

if TYPE_CHECKING:
    from lg_core.engine.driven_frames import StepScope, Transition
    from lg_core.engine.tool_steps import ToolStep
    from lg_core.run import Run
    from lg_core.store import RunRecord
    from lg_core.tool import PreparedInput

# A request longer than this is refused as invalid input the model reads: the message becomes the
# child run's stored input and its first prompt, so its size is bounded like a subagent's message.
MAX_MESSAGE_CHARS = 16_000
INPUT_SCHEMA: Mapping[str, Any] = MappingProxyType(
    {
        "type": "object",
        "properties": {
            "message": {
                "type": "string",
                "maxLength": MAX_MESSAGE_CHARS,
                "description": "The request, written for the delegate.",
            }
        },
        "required": ["message"],
        "additionalProperties": False,
    }
)


class AssemblyTool(Tool):
    """Base of the tool classes ``agent_as_tool``/``assembly_as_tool`` declare; see the module docstring."""

    input_schema: ClassVar[Any] = INPUT_SCHEMA
    assembly: ClassVar[Any] = None  # the Agent or assembly class the call runs
    preserve_context: ClassVar[bool] = False
    _usage_counted = False  # the child's usage was added to this call's step (an instance serves one step)

    def call_on_step(self, step: ToolStep, prepared: PreparedInput) -> ToolOutcome | Transition:
        """The child's answer, or the transition parking the step while the child runs on the workers."""
        scope = step.scope
        child_id = child_run_id(scope.run.id, scope.key)
        options: dict[str, Any] = {"context": dict(scope.built_context.state)}
        if self.preserve_context:
            options["history"] = self._previous_conversation(step)
        message = prepared.value["message"]
        child = start_or_find_child(scope, self.assembly, message, child_id, None, **options)
        if child is None:
            # A child found ended by the park's own transition is recorded there; a cancel or deadline
            # that stopped it stops the parent at its next step.
            return park_on_child(
                scope,
                child_id,
                still_open=step.still_open,
                after=lambda ended, _child_id: step.record(self._answer(step, ended)),
                what="tool call",
            )
        if not child.completed:
            scope.check_interrupt()  # the parent's cancel or deadline stopped the child: the parent stops too
        return self._answer(step, child)

    def resumes_on_step(self, scope: StepScope) -> bool:
        """Has an earlier execution of this step started its child (lg_core.engine.tool_steps)?"""
        try:
            scope.engine.store.load_run(child_run_id(scope.run.id, scope.key))
        except RunNotFoundError:
            return False
        return True

    def call(self, input: Any) -> Any:
        """Outside a tool-call step: the assembly asked in this process, its answer returned."""
        context = self.context
        state = dict(context.state) if context is not None else {}
        run = self.assembly.ask(input["message"], context=state, runtime=self.runtime)
        outcome = self._outcome_of(run)
        if not outcome.ok:
            raise ToolError(outcome.text)
        return outcome.text

    def _answer(self, step: ToolStep, child: Run) -> ToolOutcome:
        """The call's outcome from its ended child, the child's usage added to the step's once."""
        scope = step.scope
        if not self._usage_counted:  # a transition re-run after a lost race must not count it again
            self._usage_counted = True
            scope.built_context.record_usage(child.usage)
        return self._outcome_of(child)

    def _outcome_of(self, child: Run) -> ToolOutcome:
        if child.completed:
            result = child.result
            if result is not None and result.structured_result is not None:
                return success_outcome(json.dumps(result.structured_result.value, default=str))
            return success_outcome(result.text if result is not None else (child.response or ""))
        error = child.error
        detail = describe_error(error) if error is not None else f"it ended {child.outcome}"
        return ToolOutcome.failure(f"{self.tool_name} did not answer: {detail}", "tool_error", error)

    def _previous_conversation(self, step: ToolStep) -> list[Message]:
        """The conversation of this tool's latest earlier call in this run, for ``preserve_context``.

        The calls are serialized, so the latest child to have ended holds the whole conversation
        (each call's history is the one before's)."""
        scope = step.scope
        runtime, seen = scope.engine.runtime, cast("dict[str, RunRecord]", {})
        latest: tuple[float, Run] | None = None
        for record in scope.engine.store.load_steps(scope.run.id, prefix=f"{scope.frame.path}/turn-"):
            if record.kind != "tool" or record.key == scope.key or (record.input or {}).get("name") != self.tool_name:
                continue
            child_id = child_run_id(scope.run.id, record.key)
            child = ended_child(runtime, child_id, seen=seen)
            if child is None or child.result is None:
                continue
            finished = seen[child_id].finished_at or 0.0
            if latest is None or finished > latest[0]:
                latest = (finished, child)
        if latest is None or latest[1].result is None:
            return []
        return [message for message in latest[1].result.messages if message.role != "system"]


def assembly_tool_class(
    owner: type,
    assembly: type,
    name: str,
    description: str,
    *,
    model: Any = None,
    tools: tuple[type, ...] | None = None,
    preserve_context: bool = False,
) -> type[AssemblyTool]:
    """The tool class ``owner`` (an Agent class or a mixin) declares with ``agent_as_tool``/``assembly_as_tool``.

    ``model``/``tools`` override an Agent's own: the call then runs the subclass of it
    lg_core.assemblies.agent_overrides makes, importable on any worker.
    """
    attribute = override_attribute("agent", name)
    delegate = agent_with_overrides(owner, assembly, attribute, f"tool {name!r}", model=model, tools=tools)
    namespace = {
        "__module__": owner.__module__,
        "__qualname__": f"{owner.__qualname__}.{override_attribute('tool', name)}",
        "tool_name": name,
        "description": description,
        "assembly": delegate,
        "preserve_context": preserve_context,
        "exclusive": preserve_context,  # one conversation: its calls run one after another
    }
    return type(f"{assembly.__name__}Tool", (AssemblyTool,), namespace)


__all__ = ["INPUT_SCHEMA", "AssemblyTool", "assembly_tool_class"]
