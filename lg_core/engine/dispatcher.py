"""The dispatcher protocol: how a committed step's successors get executed.

A StepRef carries ids only (so a broker message holds no prompt or user data):
everything else is read from the run
store by whoever executes it. The LocalDispatcher executes refs in this
process; the Celery dispatcher (lg_workers) publishes them as tasks. The
transitions are the same engine code either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StepRef:
    run_id: str
    key: str
    kind: str  # a name in the step-kind table (lg_core.engine.step_kinds)
    frame_id: str

    @property
    def task_name(self) -> str:
        """The Celery task that executes this step (the step-kind table's; ``lg.advance`` for another kind)."""
        from lg_core.engine.step_kinds import task_name_for  # the table imports every kind's module

        return task_name_for(self.kind)


class Dispatcher(Protocol):
    """Something that makes published step refs run, once each, eventually."""

    def publish(self, refs: list[StepRef]) -> None: ...


__all__ = ["Dispatcher", "StepRef"]
