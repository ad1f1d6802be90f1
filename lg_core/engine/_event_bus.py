"""In-process event delivery from the engine to the Runs watching it.

The engine publishes every event of a run here as it happens; a Run that is
being streamed in this process subscribes. Publishing with no subscriber is a
dictionary miss, so unobserved runs pay nothing. Cross-process delivery (Redis
Streams) is a different sink with the same ``publish`` method.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from lg_core.events import StreamEvent

Subscriber = Callable[[StreamEvent], None]


class EventBus:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[str, list[Subscriber]] = {}

    def subscribe(self, run_id: str, subscriber: Subscriber) -> Callable[[], None]:
        """Deliver ``run_id``'s events to ``subscriber``; returns the unsubscribe function."""
        with self._lock:
            self._subscribers.setdefault(run_id, []).append(subscriber)

        def unsubscribe() -> None:
            with self._lock:
                listeners = self._subscribers.get(run_id, [])
                if subscriber in listeners:
                    listeners.remove(subscriber)
                if not listeners:
                    self._subscribers.pop(run_id, None)

        return unsubscribe

    def observed(self, run_id: str) -> bool:
        """Whether a subscriber of ``run_id`` reads its events, not only its ending.

        A Run handle subscribes to learn its outcome, and says through
        ``observes_every_event`` whether a consumer of its stream is behind it; any other
        subscriber (a log, a printer, a follower) counts as reading every event.
        """
        for listener in tuple(self._subscribers.get(run_id, ())):
            if getattr(getattr(listener, "__self__", None), "observes_every_event", True):
                return True
        return False

    def publish(self, run_id: str, event: StreamEvent) -> None:
        listeners = self._subscribers.get(run_id)
        if not listeners:
            return
        for listener in list(listeners):
            listener(event)


__all__ = ["EventBus"]
