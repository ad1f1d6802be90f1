"""What a step's task tells Celery (and so Flower) about its step: a result, or a failure when it failed its run.

A run's failure is the run's outcome, committed by the step like any other,
not an error of the worker: the task still fails, so that Flower's Failed
counter and a task's FAILURE state show each run that failed, with the
content-free summary of lg_core.engine.run_endings. ``RunFailed`` is in each
step task's ``throws``, Celery's list of expected errors: the worker logs it
as one INFO line, without the traceback of a real failure.
"""

from __future__ import annotations

from lg_core.engine.run_endings import RunEnding


class RunFailed(Exception):
    """The step's commit ended its run as failed (already recorded; nothing to retry)."""


def task_result(outcome: str, ending: RunEnding | None) -> str:
    """The task's result: what happened to the step (``executed``, ``done`` ...), then how its run ended, if it did."""
    return outcome if ending is None else f"{outcome}: {ending.summary}"


__all__ = ["RunFailed", "task_result"]
