"""Workflow.Invocation: one lazy child call inside a Workflow's ``perform``.

``invoke`` records what to call (participant, input, name, history, context, policy) and
returns an invocation without running anything. Reading ``output`` consumes it: the
workflow's host (the engine, for a run) executes the child and returns its RunResult,
whose ``output`` is kept, so reading it again gives the same value. ``perform`` returns its
final invocation unconsumed, for the host to stream to the caller.

The host is whatever executes the workflow; it must provide :class:`WorkflowHost`. A
workflow instance without one (built outside a run) can declare calls but not run them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from lg_core.assemblies._policy import StepPolicy
from lg_core.errors import AssemblyError, ReplayDivergenceError

if TYPE_CHECKING:
    from lg_core.assemblies.workflow import Workflow


@dataclass(frozen=True, slots=True)
class InvocationRequest:
    """What one ``invoke`` asked for. ``input``, ``history`` and ``context`` None mean the workflow's own."""

    participant: Any
    name: str
    input: Any = None
    history: Any = None
    context: Any = None
    policy: StepPolicy = StepPolicy()
    index: int = 0  # the 0-based position of this call among the workflow's invocations

    def signature(self) -> dict[str, Any]:
        """What a replay of ``perform`` must ask for again at this position: the call's place, name and
        participant. The input is left out, as a deterministic-replay engine leaves out arguments: the
        committed child output is reused, and text built from a clock or a random value would differ."""
        return {
            "index": self.index,
            "name": self.name,
            "assembly_id": str(self.participant.assembly_id),
            "assembly_kind": str(self.participant.assembly_kind),
        }


def check_same_call(recorded: Mapping[str, Any], request: InvocationRequest, workflow: str) -> None:
    """ReplayDivergenceError naming both calls when a replayed ``perform`` asks, at a position where it
    recorded one child, for another: its committed output would answer the wrong question."""
    asked = request.signature()
    if dict(recorded) != asked:
        raise ReplayDivergenceError(
            f"{workflow}.perform diverged on replay at call #{request.index}: it first invoked "
            f"{_described(recorded)}, and now invokes {_described(asked)}; perform must make the same calls "
            "in the same order each time it runs (decide branches from child outputs, not from clocks or randomness)",
            recorded=dict(recorded),
            asked=asked,
        )


def _described(signature: Mapping[str, Any]) -> str:
    return f"{signature.get('name')} ({signature.get('assembly_kind')} {signature.get('assembly_id')})"


class WorkflowHost(Protocol):
    """What executes a workflow's child calls (the engine provides it for a run)."""

    def run_invocation(self, invocation: WorkflowInvocation) -> Any:
        """Execute one child and return its RunResult."""
        ...

    def run_parallel(self, invocations: Sequence[WorkflowInvocation], max_concurrency: int | None) -> list[Any]:
        """Execute several children, at most ``max_concurrency`` at once; their RunResults in order."""
        ...


class WorkflowInvocation:
    """Hold one lazy assembly call inside a workflow composition."""

    __slots__ = ("_result", "request", "workflow")

    def __init__(self, workflow: Workflow, request: InvocationRequest) -> None:
        self.workflow = workflow
        self.request = request
        self._result: Any = None

    def __repr__(self) -> str:
        state = "consumed" if self.consumed else "pending"
        return f"<Workflow.Invocation {self.request.name} #{self.request.index} {state}>"

    @property
    def consumed(self) -> bool:
        """Whether the child ran here (``output`` was read, or it ran in ``parallel``)."""
        return self._result is not None

    @property
    def result(self) -> Any:
        """The child's RunResult once consumed, else None."""
        return self._result

    @property
    def output(self) -> Any:
        """Consume this invocation when necessary and return its RunResult's ``output``."""
        if self._result is None:
            self.consume(self.workflow.host_for(self).run_invocation(self))
        return self._result.output

    def consume(self, result: Any) -> None:
        """Record the child's RunResult (the host calls this for calls it ran in parallel)."""
        if result is None:
            raise AssemblyError(f"the host returned no result for {self!r}")
        self._result = result


__all__ = ["InvocationRequest", "WorkflowHost", "WorkflowInvocation", "check_same_call"]
