"""How the step a thread just executed ended its run, for the code that ran it.

A worker's task reports a step to Celery (and so to Flower) as a task
result; the run's own outcome is written by the step's commit and never
raised. Without this a step whose commit fails the run would be a succeeded
task ("executed"), and Flower's Failed counter would never show a failed run.
The committer notes each run ending on the committing thread
(:func:`note_ending`); the task takes it after the step (:func:`take_ending`)
and fails (or labels) its task with the summary.

The summary is for operators' dashboards, which are not the run store: it
names the outcome and the error's class with the class's fixed sentence
(lg_core.engine._caller_errors), never the error's own text, which can echo a
provider's answer or a user's data.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from lg_core.engine._caller_errors import default_error_message
from lg_core.errors import CancelledError


@dataclass(frozen=True, slots=True)
class RunEnding:
    """A run's end as a step's commit wrote it: ``status`` and a content-free ``summary``."""

    status: str  # completed | failed | partial | cancelled
    summary: str  # e.g. "run failed: HTTPError: the model provider returned an error."

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @classmethod
    def of(cls, status: str, error: BaseException | None) -> RunEnding:
        """The ending ``status`` with ``error``; a cancellation's reason (an application's text) is left out."""
        if error is None or isinstance(error, CancelledError):
            return cls(status, f"run {status}")
        return cls(status, f"run {status}: {default_error_message(error)}")


_last = threading.local()


def note_ending(ending: RunEnding) -> None:
    """Record that this thread's current step ended its run (the committer, once the commit applied)."""
    _last.ending = ending


def take_ending() -> RunEnding | None:
    """The ending this thread's last step committed, if any, and forget it."""
    ending: RunEnding | None = getattr(_last, "ending", None)
    _last.ending = None
    return ending


__all__ = ["RunEnding", "note_ending", "take_ending"]
