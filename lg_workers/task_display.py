"""How a step's task is shown to monitoring (Flower, ``celery inspect``): run, step and tool, never content.

A task's arguments stay ids only (``[run_id, step_key]``, what the task reads);
Celery's display-only representation (``argsrepr``, which task events and
Flower show in place of the arguments) says what the row is:
``run=<run id> step=<step key>``, led by ``tool=<name>`` for a tool call and ``node=<name>`` for a graph node (Flower
cuts a long argument column short, so what tells rows apart comes first). The
scheduler reads it back from task events (:func:`parse_display`) to tell
Flower which tasks a dead worker held (lg_scheduler.lost_tasks).
"""

from __future__ import annotations

import re

from lg_core.engine.dispatcher import StepRef

_DISPLAY = re.compile(r"(?:(?:tool|node)=\S+ )?run=(?P<run>\S+) step=(?P<step>\S+)")
# What a labelled step's label names, by its kind: a tool call's tool, a graph node's node.
_LABEL_NAMES = {"graph_node": "node"}


def display_args(ref: StepRef) -> str:
    """``run=<id> step=<key>``, after ``tool=<name>`` (a tool call) or ``node=<name>`` (a graph node)."""
    shown = f"run={ref.run_id} step={ref.key}"
    return f"{_LABEL_NAMES.get(ref.kind, 'tool')}={ref.label} {shown}" if ref.label else shown


def parse_display(args: str | None) -> tuple[str, str] | None:
    """The (run id, step key) a task event's ``args`` shows; None for another task's (``lg.advance``)."""
    found = _DISPLAY.fullmatch(args or "")
    return None if found is None else (found["run"], found["step"])


__all__ = ["display_args", "parse_display"]
