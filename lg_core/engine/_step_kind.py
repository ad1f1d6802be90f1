"""What a step kind declares: the one record the engine, the workers and recovery read about it.

A kind of step (a model turn, a tool call) is one module holding its body and a
``StepKind`` describing it; the table of every kind is
``lg_core.engine.step_kinds``. Names are plain strings, never Celery objects:
``lg_core`` does not import Celery, so ``lg_workers`` builds each kind's task
and route from these strings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lg_core.engine._step_scope import StepScope, Transition
    from lg_core.engine.step_kinds import StepKindName


class StepBody(Protocol):
    """One execution of a step, built on its scope.

    ``perform`` does the step's work outside any transaction (the model call,
    the tool call) and returns the *transition*: the pure function from the
    frame's latest state to the step's commit, which the engine calls again
    after a lost version race instead of redoing the work.
    """

    @property
    def partial_text(self) -> str:
        """The text streamed so far, the response of a run its deadline ends during the step."""
        ...

    def perform(self) -> Transition: ...


def _commits_alone(scope: StepScope) -> bool:
    return False


def _no_label(step_input: dict[str, Any] | None) -> str:
    return ""


def _kind_queue(step_input: dict[str, Any] | None) -> str:
    return ""


@dataclass(frozen=True, slots=True)
class StepKind:
    """A kind of step: its stored name, key, Celery task and queue, and how it executes."""

    name: StepKindName  # ``lg_steps.kind`` and ``StepRef.kind``
    key_shape: str  # the shape of its step keys, e.g. ``<frame path>/turn-<N>/model``
    task_name: str  # the Celery task that executes it (queued messages and Flower name it)
    queue: str  # the broker queue its task is routed to
    body: Callable[[StepScope], StepBody]  # how it executes
    # Whether the step row's input is the body's (a tool call's arguments); else none is read.
    takes_input: bool = False
    # Whether other steps of its frame may be committing in this process now (a turn's parallel
    # tool calls): the commit then takes the frame's lock and starts from the frame's latest state.
    has_running_siblings: Callable[[StepScope], bool] = _commits_alone
    # What monitoring shows beside a step's key, from its stored input (StepRef.label): a tool call's
    # tool name. Never content: the broker message's display arguments carry it (lg_workers.task_display).
    label: Callable[[dict[str, Any] | None], str] = _no_label
    # The queue one step must go to instead of the kind's, from its stored input ("" for the kind's):
    # a code-mode wait or stop goes to the process holding its program (lg_core.engine._code_exec).
    route: Callable[[dict[str, Any] | None], str] = _kind_queue


__all__ = ["StepBody", "StepKind"]
