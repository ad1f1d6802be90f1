"""Workflow: participants coordinated by ordinary Python in ``perform``, as a class or a builder.

    class ResponseWorkflow(Workflow):
        def perform(self):
            research = self.invoke(ResearchAgent, as_="research").output
            return self.invoke(CustomerSupportAgent, input=f"{self.input.text}\\n\\nVerified research:\\n{research}")

``invoke`` prepares a lazy child call (an Agent or any assembly); ``.output`` runs an
intermediate one; ``parallel`` runs several at once, each with its own copy of the context;
``perform`` returns its final invocation unconsumed so its events stream to the caller
(anything else is a ProtocolError, :meth:`Workflow.final_invocation`). ``as_`` names the child
in steps and trajectories; a child gets the workflow's input, history and context unless the
call passes its own; ``timeout``, ``retries`` (with a required ``retry_on``) and
``retry_delay`` set its policy. The host that executes the calls is the engine's; see
``workflow_invocation``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from lg_core.assemblies._participants import checked_participant
from lg_core.assemblies._policy import checked_optional_limit, checked_policy
from lg_core.assemblies._workflow_step import WorkflowStep, run_composition, workflow_start
from lg_core.assemblies.assembly import GRAPH_DECLARATIONS, SWARM_DECLARATIONS, Assembly
from lg_core.assemblies.builder import AssemblyBuilder
from lg_core.assemblies.declarations import checked_name
from lg_core.assemblies.definition import AssemblyDefinition, WorkflowSpec
from lg_core.assemblies.trajectory import stored_assembly_result
from lg_core.assemblies.workflow_invocation import InvocationRequest, WorkflowHost, WorkflowInvocation
from lg_core.engine.driven_frames import DrivenStart
from lg_core.errors import AssemblyError, ConfigurationError, InvocationError, ProtocolError
from lg_core.messages import Message
from lg_core.run_result import RunResult


class Workflow(Assembly):
    """Coordinates assembly participants with ordinary Python control flow."""

    assembly_kind: ClassVar[str] = "workflow"
    Invocation = WorkflowInvocation
    _kind_base: ClassVar[bool] = True
    _REFUSED: ClassVar[Mapping[str, str]] = {
        **Assembly._REFUSED,
        **dict.fromkeys(GRAPH_DECLARATIONS, "that is a Graph declaration; a Workflow composes its calls in perform"),
        **dict.fromkeys(SWARM_DECLARATIONS, "that is a Swarm declaration; a Workflow composes its calls in perform"),
        **dict.fromkeys(("start", "max_steps"), "a Workflow composes its calls in perform"),
    }

    @classmethod
    def _read_definition(cls) -> AssemblyDefinition | None:
        if "perform" not in vars(cls):
            inherited = cls.declared_definition()
            return None if inherited is None else cls._new_definition(WorkflowSpec())
        check_perform(vars(cls)["perform"], f"{cls.__qualname__}.perform")
        return cls._new_definition(WorkflowSpec())

    @classmethod
    def _incomplete(cls) -> str:
        return f"{cls.__qualname__} defines no perform; define `def perform(self)` returning its final invoke(...)"

    # -- running (the engine calls these on the run's entrypoint class) ------------------------

    @classmethod
    def driven_start(cls, run: Any) -> DrivenStart:
        """A new run's frame (no calls yet, the definition it executes) and its perform step."""
        definition, stored = cls.started_definition(run)
        return workflow_start(definition.assembly_id, stored)

    @classmethod
    def step_body(cls, scope: Any) -> WorkflowStep:
        """The body of the run's perform step: ``perform`` replayed against the recorded calls, the composition
        the run started with (a builder's stored ``perform``, else this class's)."""
        stored = scope.frame.checkpoint.data.get("definition")
        composition = run_composition(scope.run.id, stored, cls)
        name = cls.__qualname__ if composition is None else f"workflow {stored['assembly_id']}"  # a builder's perform
        return WorkflowStep(scope, cls, composition, name)

    @classmethod
    def stored_result(cls, stored: Mapping[str, Any]) -> RunResult:
        """The RunResult of a finished run read back from the store, with its trajectory."""
        return stored_assembly_result(stored)

    @classmethod
    def to_builder(cls) -> WorkflowBuilder:
        """A mutable WorkflowBuilder seeded with this class's composition."""
        return WorkflowBuilder(base=cls)

    def __init__(
        self, input: Any = None, *, history: Any = (), context: Mapping[str, Any] | None = None, host: Any = None
    ) -> None:
        self.input = None if input is None else Message.coerce(input)
        self.history = tuple(history)
        self.context = dict(context or {})
        self.host: WorkflowHost | None = host
        self.invocations: list[WorkflowInvocation] = []  # every invoke(...) of this perform, in order

    def perform(self) -> WorkflowInvocation:
        """The composition: call ``invoke`` and return the final invocation unconsumed."""
        raise ConfigurationError(type(self)._incomplete())

    def invoke(
        self,
        participant: Any,
        input: Any = None,
        *,
        as_: str | None = None,
        history: Any = None,
        context: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        retries: int = 0,
        retry_on: Any = None,
        retry_delay: float = 0,
    ) -> WorkflowInvocation:
        """Prepare one lazy child call; nothing runs until its ``output`` is read or it is returned."""
        owner = f"{type(self).__qualname__}.invoke"
        checked = checked_participant(participant, owner)
        name = checked_name(as_, f"{owner}: as_") if as_ is not None else str(checked.assembly_id)
        if context is not None:
            context = json_like_copy(context, f"{owner}({name}): context")
        request = InvocationRequest(
            participant=checked,
            name=name,
            input=input,
            history=None if history is None else tuple(history),
            context=context,
            policy=checked_policy(
                f"{owner}({name})", timeout=timeout, retries=retries, retry_on=retry_on, retry_delay=retry_delay
            ),
            index=len(self.invocations),
        )
        invocation = WorkflowInvocation(self, request)
        self.invocations.append(invocation)
        return invocation

    def parallel(self, *invocations: WorkflowInvocation, max_concurrency: int | None = None) -> list[Any]:
        """Run independent pending invocations at once (at most ``max_concurrency``); their outputs in order."""
        bound = checked_optional_limit(max_concurrency, f"{type(self).__qualname__}.parallel max_concurrency")
        for invocation in invocations:
            self._check_own(invocation, "parallel")
            if invocation.consumed:
                raise ProtocolError(f"{invocation!r} was already consumed; parallel takes pending invocations")
        if not invocations:
            return []
        results = self.host_for(invocations[0]).run_parallel(list(invocations), bound)
        for invocation, result in zip(invocations, results, strict=True):
            invocation.consume(result)
        return [invocation.output for invocation in invocations]

    def final_invocation(self, returned: Any) -> WorkflowInvocation:
        """What ``perform`` returned, when it is this workflow's unconsumed invocation; else ProtocolError."""
        owner = f"{type(self).__qualname__}.perform"
        if not isinstance(returned, WorkflowInvocation):
            raise ProtocolError(
                f"{owner} returned {type(returned).__name__}; it must return its final invoke(...) unconsumed, "
                "so that the final answer streams to the caller"
            )
        self._check_own(returned, "perform's return")
        if returned.consumed:
            raise ProtocolError(
                f"{owner} returned {returned!r}, whose output was already read; return the final invoke(...) "
                "without reading .output"
            )
        return returned

    def host_for(self, invocation: WorkflowInvocation) -> WorkflowHost:
        """The host executing this workflow's calls; AssemblyError outside a run."""
        if self.host is None:
            raise AssemblyError(
                f"{invocation!r} cannot run: this {type(self).__qualname__} instance is not executing in a run "
                "(call the workflow with ask, stream_ask or start_execution)"
            )
        return self.host

    def _check_own(self, invocation: Any, where: str) -> None:
        if not isinstance(invocation, WorkflowInvocation) or invocation.workflow is not self:
            raise ProtocolError(f"{type(self).__qualname__}: {where} takes invocations made by this workflow's invoke")


def check_perform(perform: Any, owner: str) -> None:
    """``perform`` must be an ordinary method taking only ``self``, or the workflow could not call it."""
    if isinstance(perform, (staticmethod, classmethod)) or not inspect.isfunction(perform):
        raise ConfigurationError(f"{owner} must be an ordinary method, `def perform(self)`")
    if (
        inspect.iscoroutinefunction(perform)
        or inspect.isgeneratorfunction(perform)
        or inspect.isasyncgenfunction(perform)
    ):
        raise ConfigurationError(f"{owner} must be an ordinary `def perform(self)`, not async or a generator")
    try:
        inspect.signature(perform).bind(object())
    except TypeError:
        raise ConfigurationError(f"{owner}{inspect.signature(perform)} must take only self") from None


def json_like_copy(value: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """A deep copy of JSON-like ``value`` (what a child may receive); InvocationError for anything else."""
    try:
        copied = json.loads(json.dumps(dict(value)))
    except (TypeError, ValueError) as exc:
        raise InvocationError(f"{owner} must be JSON-like (dicts, lists, strings, numbers, booleans): {exc}") from None
    return copied  # type: ignore[no-any-return]


class WorkflowBuilder(AssemblyBuilder):
    """Builds a Workflow whose composition function is supplied at runtime."""

    kind = "workflow"
    default_base = Workflow

    def __init__(self, id: str | None = None, description: str | None = None, runtime: Any = None, base: Any = None):
        self._perform: Callable[[Any], Any] | None = None
        super().__init__(id=id, description=description, runtime=runtime, base=base)

    def perform(self, composition: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Set the composition, a function of the workflow instance (usable as a decorator)."""
        if not callable(composition) or inspect.iscoroutinefunction(composition):
            raise ConfigurationError(f"{type(self).__name__}.perform takes an ordinary function of the workflow")
        try:
            inspect.signature(composition).bind(object())
        except TypeError:
            raise ConfigurationError(
                f"{type(self).__name__}.perform: {composition!r} must take the workflow as its one argument"
            ) from None
        except ValueError:
            pass
        self._perform = composition
        return composition

    def _spec(self, owner: str) -> WorkflowSpec:
        if self._perform is None and self._base.declared_definition() is None:
            raise ConfigurationError(f"{owner} has no composition; give it one with .perform(function)")
        return WorkflowSpec(perform=self._perform)


__all__ = ["Workflow", "WorkflowBuilder", "check_perform", "json_like_copy"]
