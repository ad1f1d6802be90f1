"""Forwarding a child run's events to its parent's stream as ``agent_stream`` wrappers.

A child run executing in this process (a local assembly step's participant) is
*linked* to its parent while it runs: every event published for the child is
first wrapped and published for the parent, so the parent's Run (and, through it,
its own parent, one step further out) sees the wrapper before any observer of the
child sees the event itself. Forwarding happens on the publishing thread, so one
child's events keep their order, and the parent Run's delivery lock keeps its
observer from being called concurrently. A link holds no events (nothing is
buffered) and is dropped when the child's step has its result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from lg_core.agent_stream import AgentStreamLink
from lg_core.events import StreamEvent


class AgentStreamLinks:
    """The links of the child runs executing here, keyed by child run id."""

    def __init__(self) -> None:
        self._links: dict[str, AgentStreamLink] = {}
        self._lock = threading.Lock()

    def link(self, child_run_id: str, link: AgentStreamLink) -> None:
        with self._lock:
            self._links[child_run_id] = link

    def unlink(self, child_run_id: str) -> None:
        with self._lock:
            self._links.pop(child_run_id, None)

    def forward(self, run_id: str, events: list[StreamEvent], publish: Callable[[str, StreamEvent], None]) -> None:
        """Publish, for ``run_id``'s parent, the wrapper of each of ``events`` (nothing when unlinked)."""
        if not self._links:
            return
        link = self._links.get(run_id)
        if link is None:
            return
        for event in events:
            wrapper = link.forwarded(run_id, event)
            if wrapper is not None:
                publish(link.parent_run_id, wrapper)


__all__ = ["AgentStreamLinks"]
