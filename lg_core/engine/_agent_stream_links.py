"""Forwarding a child run's events to its parent's stream as ``agent_stream`` wrappers.

A child run executing in this process (a local assembly step's participant) is
*linked* to its parent while it runs: every event published for the child is
first wrapped and published for the parent, so the parent's Run (and, through it,
its own parent, one step further out) sees the wrapper before any observer of the
child sees the event itself. Forwarding happens on the publishing thread, so one
child's events keep their order, and the parent Run's delivery lock keeps its
observer from being called concurrently. A link holds no events (nothing is
buffered) and is dropped when the child's step has its result. Wrappers are
live-only, so none is made while nobody watches the parent's stream, nor, through
the parent's own link, any enclosing run's: each node of a Graph asked without an
observer would otherwise copy and freeze every event of its child for nothing.
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

    def forward(
        self,
        run_id: str,
        events: list[StreamEvent],
        publish: Callable[[str, StreamEvent], None],
        observed: Callable[[str], bool],
    ) -> None:
        """Publish, for ``run_id``'s parent, the wrapper of each of ``events`` (nothing when unlinked,
        or when ``observed`` says nobody watches the parent or any run enclosing it)."""
        if not self._links:
            return
        link = self._links.get(run_id)
        if link is None or not self._watched(link.parent_run_id, observed):
            return
        for event in events:
            wrapper = link.forwarded(run_id, event)
            if wrapper is not None:
                publish(link.parent_run_id, wrapper)

    def _watched(self, run_id: str, observed: Callable[[str], bool]) -> bool:
        """Whether ``run_id``'s stream, or that of a run its links lead to, has an observer."""
        seen: set[str] = set()
        current: str | None = run_id
        while current is not None and current not in seen:
            if observed(current):
                return True
            seen.add(current)
            link = self._links.get(current)
            current = None if link is None else link.parent_run_id
        return False


__all__ = ["AgentStreamLinks"]
