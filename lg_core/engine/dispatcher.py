"""The dispatcher protocol: how a committed step's successors get executed.

A StepRef carries ids only (so a broker message holds no prompt or user data):
everything else is read from the run store by whoever executes it. Its
``label`` (a tool call's tool name) is for monitoring's display alone. The LocalDispatcher executes refs in this
process; the Celery dispatcher (lg_workers) publishes them as tasks. The
transitions are the same engine code either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from lg_core.store import NewStep, StepRecord


@dataclass(frozen=True, slots=True)
class StepRef:
    run_id: str
    key: str
    kind: str  # a name in the step-kind table (lg_core.engine.step_kinds)
    frame_id: str
    # What a dashboard names the step by besides its key (a tool call's tool), display only:
    # not part of the step's identity (two refs to one step are equal with or without it).
    label: str = field(default="", compare=False)
    # The queue this step must be sent to instead of its kind's, or "" (StepKind.route): not part of
    # its identity either.
    queue: str = field(default="", compare=False)

    @property
    def task_name(self) -> str:
        """The Celery task that executes this step (the step-kind table's; ``lg.advance`` for another kind)."""
        from lg_core.engine.step_kinds import task_name_for  # the table imports every kind's module

        return task_name_for(self.kind)

    @classmethod
    def of(cls, run_id: str, step: NewStep | StepRecord) -> StepRef:
        """The ref of a stored or new ``step`` of ``run_id``, labelled by its kind (a tool call's tool name)."""
        from lg_core.engine.step_kinds import STEP_KINDS

        kind = STEP_KINDS.get(step.kind)
        if kind is None or step.input is None:
            return cls(run_id, step.key, step.kind, step.frame_id)
        return cls(run_id, step.key, step.kind, step.frame_id, kind.label(step.input), kind.route(step.input))


class Dispatcher(Protocol):
    """Something that makes published step refs run, once each, eventually."""

    def publish(self, refs: list[StepRef]) -> None: ...


__all__ = ["Dispatcher", "StepRef"]
