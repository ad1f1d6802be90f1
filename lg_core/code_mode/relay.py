"""Relay: hands a program's tool calls to the step that is observing the program now.

A program may outlive the ``exec`` that started it and keep running until a
later ``wait`` or ``stop``. Each brokered call belongs to a durable step: its
events, callbacks, workspace and usage are that step's. So the step observing
the program attaches a handler for its duration, and a call the program makes
while no step observes it waits for the next one (``wait`` or ``stop``) to
attach. Detaching waits for the calls in flight, so none outlives the step
whose resources and event log it uses. Closing releases every waiting call
with a failure, so a program being torn down never blocks its own cleanup.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from lg_core.tool import ToolOutcome

Handler = Callable[[str, Mapping[str, Any]], ToolOutcome]


class Relay:
    """A Broker's ``dispatch``; see the module docstring. Safe to call from several threads."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._handler: Handler | None = None
        self._in_flight = 0
        self._handled = 0
        self._closed = False

    def attach(self, handler: Handler) -> None:
        """Run calls with ``handler`` (the observing step's tool path) until :meth:`detach`."""
        with self._condition:
            self._handler, self._handled = handler, 0
            self._condition.notify_all()

    def detach(self) -> int:
        """Stop handing calls to the attached handler once those in flight finished; how many it ran."""
        with self._condition:
            self._handler = None
            while self._in_flight:
                self._condition.wait()
            return self._handled

    def close(self) -> None:
        """Fail every call that waits for a step, and any later one."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def __call__(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        with self._condition:
            while self._handler is None and not self._closed:
                self._condition.wait()
            if self._closed or self._handler is None:
                return ToolOutcome.failure(f"the call to {name!r} was not run: the program is being stopped", "stopped")
            handler = self._handler
            self._in_flight += 1
            self._handled += 1
        try:
            return handler(name, arguments)
        finally:
            with self._condition:
                self._in_flight -= 1
                self._condition.notify_all()


__all__ = ["Handler", "Relay"]
