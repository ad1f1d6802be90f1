"""``lg runs events RUN_ID --agents``: an assembly run's events with its participants' own.

An assembly run's log holds its own events; each participant (a Graph node, a
Swarm member, a Workflow call) ran as a child run that keeps its Agent's events
in its own log, and the ``agent_stream`` wrappers a caller saw live are not
stored a second time. This reads the child runs (nested assemblies' too) and
interleaves every log by time, each event under the path of participants that
produced it, so the whole composite reads as one story.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.markup import escape
from rich.table import Table

from lg_core.cli_output import event_detail
from lg_core.store.records import EventRecord

MAX_DEPTH = 8  # assemblies nest a few levels; a deeper tree is listed down to here
MAX_CHILDREN = 1000  # child runs read per run


@dataclass(frozen=True, slots=True)
class PathedEvent:
    """One event of the run or of a participant: ``path`` is empty for the run's own."""

    path: str
    event: EventRecord


def participant_events(store: Any, run_id: str, after: int = 0) -> list[PathedEvent]:
    """The run's events after ``after`` and all its participants' events, in time order."""
    found = [PathedEvent("", event) for event in store.load_events(run_id, after)]
    found.extend(_children(store, run_id, "", 1))
    found.sort(key=lambda item: (item.event.created_at, item.path, item.event.seq))
    return found


def _children(store: Any, run_id: str, prefix: str, depth: int) -> Iterator[PathedEvent]:
    if depth > MAX_DEPTH:
        return
    for child in store.list_child_runs(run_id, MAX_CHILDREN):
        name = child.entrypoint.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
        path = f"{prefix}/{name}" if prefix else name
        for event in store.load_events(child.id, 0):
            yield PathedEvent(path, event)
        yield from _children(store, child.id, path, depth + 1)


def pathed_events_table(events: list[PathedEvent]) -> Table:
    """Like the run's events table, with the participant path (blank for the run's own events)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("AGENT", "SEQ", "TIME", "TYPE", "DETAIL"):
        table.add_column(name, no_wrap=name != "DETAIL", overflow="fold")
    for item in events:
        event = item.event
        when = datetime.fromtimestamp(event.created_at).strftime("%H:%M:%S.%f")[:-3]
        table.add_row(escape(item.path), str(event.seq), when, event.type, escape(event_detail(event.type, event.data)))
    return table


__all__ = ["PathedEvent", "participant_events", "pathed_events_table"]
