"""The code-mode sessions of this process: one per agent call (run and frame) that used ``exec``.

An ``exec``, ``wait`` or ``stop`` is a step, and a program outlives the step
that started it, so its Session lives here between steps, in the process that
started it: the interpreter is a child of this process and cannot move. The
session is closed (its program stopped, everything it held released) when the
agent call's run ends here; a step that finds no session for its call (the
process that started the program is gone) reports the program ``terminated``.
On workers, ``wait`` and ``stop`` reach the process holding the program through
its own queue (:func:`home_queue`), which each sandbox worker also consumes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from lg_core.code_mode.relay import Relay
from lg_core.code_mode.session import Session


class CodeModeCall:
    """One agent call's session, the relay its broker dispatches through, and the numbering of
    the current program's tool calls (their idempotency keys derive from it)."""

    def __init__(self, session: Session, relay: Relay) -> None:
        self.session, self.relay = session, relay
        self._lock = threading.Lock()
        self._program_key, self._call_id, self._calls = "", "", 0

    def program_started(self, program_key: str, call_id: str) -> None:
        """A new program, started by the step ``program_key`` (``<run>/<step key>``) for call ``call_id``."""
        with self._lock:
            self._program_key, self._call_id, self._calls = program_key, call_id, 0

    def next_call(self) -> tuple[int, str, str]:
        """The next call's sequence number in its program, the program's key and its exec call id."""
        with self._lock:
            self._calls += 1
            return self._calls, self._program_key, self._call_id

    def close(self) -> None:
        self.relay.close()
        self.session.close()


class ActiveSessions:
    """See the module docstring; safe to use from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str], CodeModeCall] = {}

    def get(self, run_id: str, frame_id: str) -> CodeModeCall | None:
        with self._lock:
            return self._calls.get((run_id, frame_id))

    def get_or_open(self, run_id: str, frame_id: str, open_call: Callable[[], CodeModeCall]) -> CodeModeCall:
        """The call's session, opened with ``open_call`` the first time."""
        with self._lock:
            call = self._calls.get((run_id, frame_id))
            if call is None:
                call = self._calls[(run_id, frame_id)] = open_call()
            return call

    def close_run(self, run_id: str) -> None:
        """Close every session of ``run_id`` held here; the first cleanup failure is raised after all closed."""
        with self._lock:
            keys = [key for key in self._calls if key[0] == run_id]
            calls = [self._calls.pop(key) for key in keys]
        first: BaseException | None = None
        for call in calls:
            try:
                call.close()
            except Exception as error:  # noqa: BLE001 - every session closes; the first failure is raised
                first = first or error
        if first is not None:
            raise first

    def run_ids(self) -> set[str]:
        with self._lock:
            return {run_id for run_id, _frame in self._calls}

    def holds_any(self) -> bool:
        """Whether this process holds a session (and so maybe a running program) of any agent call."""
        with self._lock:
            return bool(self._calls)


ACTIVE_SESSIONS = ActiveSessions()


def home_queue(queue: str, holder: str) -> str:
    """The queue of the one process ``holder`` among those serving ``queue``: ``wait`` and ``stop`` of a
    program it runs are sent there, since only that process holds the program's interpreter."""
    return f"{queue}.{holder}"


__all__ = ["ACTIVE_SESSIONS", "ActiveSessions", "CodeModeCall", "home_queue"]
