"""A code-mode control call of the agent loop: ``exec``, ``wait`` or ``stop`` (kind ``code_exec``).

Its step key and recording are a tool call's (lg_core.engine._tool_call): the
result joins the turn's tool message and the call that completes the turn
schedules the next model turn. What it executes differs: ``exec`` starts a
program in the agent call's code-mode Session (lg_core.code_mode), ``wait``
and ``stop`` observe or end it, and the result is the ProgramResult as JSON.
The session lives in this process between steps (ACTIVE_SESSIONS); a step
finding none for its agent call reports the program ``terminated``. While it
holds sessions, the process renews a holder lease of its own in the run store
(lg_core.store._holder_leases), so a scheduler on any host can tell when the
process a ``wait`` is routed to has died.

While a step observes the program, the program's tool calls are dispatched
to it (lg_core.code_mode.relay) and each runs the tool path of a direct call
(lg_core.engine._tool_execution): the agent's callbacks, validation, the
shared ``max_tool_calls`` budget, events, a binding of the run's workspace
and sandbox, and an idempotency key ``<run>/<exec step key>/call-<n>`` from
the step that started the program and the call's sequence number in it.
Public streams show each brokered call by the tool's name; the control call's
own execution events are left out, as the bookkeeping they are.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from lg_core.code_mode.active_sessions import ACTIVE_SESSIONS, CodeModeCall, home_queue
from lg_core.code_mode.broker import Broker
from lg_core.code_mode.controls import EXEC, STOP
from lg_core.code_mode.options import CodeModeOptions, program_tool_names
from lg_core.code_mode.program_result import ProgramResult
from lg_core.code_mode.relay import Relay
from lg_core.code_mode.session import OBSERVATION_SECONDS, Session, SessionStateError
from lg_core.content import ToolUse
from lg_core.engine._code_mode_offer import PROGRAM_HOLDER
from lg_core.engine._step_kind import StepKind
from lg_core.engine._step_scope import StepScope
from lg_core.engine._tool_call import ToolCall, _has_running_siblings, _tool_name
from lg_core.engine._tool_execution import execute_tool
from lg_core.engine._turn_keys import CODE_EXEC
from lg_core.lease_holders import current_holder
from lg_core.sandbox import Sandbox
from lg_core.tool import ToolOutcome, success_outcome
from lg_core.workspace import Workspace

SANDBOX_QUEUE = "lg.sandbox"
NO_SESSION_HERE = (
    "No program of this agent call is running in this process: it ended with the process that ran it, "
    "or none was started. Run it again with exec if its result is still needed."
)


class CodeExec(ToolCall):
    """See the module docstring."""

    def __init__(self, scope: StepScope) -> None:
        super().__init__(scope)
        self._brokered: BrokeredCalls | None = None
        self._still_working = False

    def _execute(self, agent: Any, registry: Any, model: Any) -> ToolOutcome:
        scope, use = self.scope, self.tool_use
        options = scope.agent_class.code_mode_options()
        if options is None:  # a control call stored for an agent that no longer declares code mode
            return ToolOutcome.failure(f"{use.name!r} is a code-mode control; this agent has no code mode", "unknown")
        run_id, frame_id = scope.run.id, scope.frame.id
        if use.name == EXEC:
            call = ACTIVE_SESSIONS.get_or_open(run_id, frame_id, lambda: _open_call(registry, options))
        else:
            found = ACTIVE_SESSIONS.get(run_id, frame_id)
            if found is None:
                return _as_outcome(ProgramResult(status="terminated", error=NO_SESSION_HERE))
            call = found
        self._brokered = BrokeredCalls(self, agent, model, call)
        call.relay.attach(self._brokered)
        try:
            result = self._control(call.session, use)
            self._still_working = result.still_working
            if result.still_working:  # before the commit names this process the program's holder
                self.scope.engine.heartbeat.keep_holder_lease(ACTIVE_SESSIONS.holds_any)
            return _as_outcome(result)
        except SessionStateError as error:
            return ToolOutcome.failure(str(error), "code_mode_state")
        finally:
            call.relay.detach()

    def _control(self, session: Session, use: ToolUse) -> ProgramResult:
        context = self.scope.context
        if use.name == EXEC:
            assert self._brokered is not None
            self._brokered.call.program_started(f"{self.scope.run.id}/{self.scope.key}", use.id)
            return session.execute(str(use.input.get("code", "")), context=context)
        if use.name == STOP:
            return session.stop(context=context)
        return session.wait(context=context)

    def _emit_stop(self, outcome: ToolOutcome) -> None:
        """The control call's own execution is bookkeeping: its brokered calls are the public events."""

    def _brokered_calls(self) -> int:
        return 0 if self._brokered is None else self._brokered.admitted

    def _step_result_extra(self) -> dict[str, Any]:
        """A program still running names the process holding it: the next wait or stop is sent there."""
        return {PROGRAM_HOLDER: current_holder()} if self._still_working else {}


class BrokeredCalls:
    """The tool path for the program's calls while one control step observes it (a Relay handler)."""

    def __init__(self, step: CodeExec, agent: Any, model: Any, call: CodeModeCall) -> None:
        self.step, self.agent, self.model, self.call = step, agent, model, call
        scope = step.scope
        self.remaining = scope.agent_class.limits["max_tool_calls"] - scope.frame.checkpoint.tool_calls_total
        self.admitted = 0
        self._lock = threading.Lock()

    def __call__(self, name: str, arguments: Any) -> ToolOutcome:
        scope, agent = self.step.scope, self.agent
        with self._lock:
            if self.admitted >= self.remaining:
                limit = scope.agent_class.limits["max_tool_calls"]
                return ToolOutcome.failure(f"the agent reached its limit of {limit} tool calls", "limit")
            self.admitted += 1
        sequence, program_key, call_id = self.call.next_call()
        use = ToolUse(id=f"{call_id}/call-{sequence}", name=name, input=dict(arguments))
        registry = agent.tool_registry(scope.binding(agent, self.model, f"{program_key}/call-{sequence}"))
        try:
            outcome = execute_tool(
                scope,
                agent,
                registry.fetch(name),
                use,
                operation_id=f"{scope.key}/call-{sequence}",
                parent_operation_id=scope.key,
            )
        finally:
            registry.close()
        outcome = self.step._bounded(outcome)
        scope.emit(
            "tool_execution_stop",
            id=use.id,
            name=name,
            status=outcome.status,
            output=outcome.text,
            error_kind=outcome.error_kind,
        )
        return outcome


def _open_call(registry: Any, options: CodeModeOptions) -> CodeModeCall:
    """A session for an agent call: its catalog is the tools that moved into programs."""
    relay = Relay()
    moved = program_tool_names(options, registry)
    broker = Broker(registry, except_={tool.tool_name for tool in registry} - moved, dispatch=relay)
    sandbox_settings = dict(options.sandbox)

    def sandbox_factory(workspace: Workspace) -> Sandbox:
        return Sandbox.from_settings(workspace, sandbox_settings)

    session = Session(broker, sandbox_factory, limits=options.limits, observation_seconds=OBSERVATION_SECONDS)
    return CodeModeCall(session, relay)


def _as_outcome(result: ProgramResult) -> ToolOutcome:
    """The observation as the model reads it: JSON; a program error is a failed call."""
    text = json.dumps(result.to_dict(), ensure_ascii=False, default=str)
    if result.status == "error":
        return ToolOutcome.failure(text, "program_error")
    return success_outcome(text)


def _holder_queue(step_input: dict[str, Any] | None) -> str:
    """A wait's or stop's queue: the one of the process holding its program (``""``: lg.sandbox's)."""
    holder = (step_input or {}).get(PROGRAM_HOLDER)
    return home_queue(SANDBOX_QUEUE, holder) if isinstance(holder, str) and holder else ""


CODE_EXEC_KIND = StepKind(
    name=CODE_EXEC,
    key_shape="<frame path>/turn-<N>/tool/<call id>",
    task_name="lg.code_exec",
    queue=SANDBOX_QUEUE,
    body=CodeExec,
    takes_input=True,
    has_running_siblings=_has_running_siblings,
    label=_tool_name,
    route=_holder_queue,
)


__all__ = ["CODE_EXEC_KIND", "OBSERVATION_SECONDS", "PROGRAM_HOLDER", "SANDBOX_QUEUE", "CodeExec"]
