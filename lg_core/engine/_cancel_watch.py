"""CancelWatch: bring a cancel request made in another process to the step running here.

A model turn polls the store's cancel flag between streamed chunks, but a tool
sees only its RunContext's token (``self.context.check()``), which nothing in
a worker process cancels when ``execution.cancel()`` is called elsewhere. While
this process executes claimed steps, one thread polls the cancel flag of their
runs every ``interval`` seconds and cancels the run's token when it is set, so
a tool that checks its context stops within about a second, on any worker.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from lg_core.cancellation import CancellationToken
from lg_core.store import RunStore


class CancelWatch:
    def __init__(self, store: RunStore, interval: float, on_cancel: Callable[[str], None]) -> None:
        self.store = store
        self.interval = interval
        self.on_cancel = on_cancel
        self._lock = threading.Lock()
        self._watched: dict[str, tuple[CancellationToken, int]] = {}
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._stopped = threading.Event()

    @contextmanager
    def watching(self, run_id: str, token: CancellationToken | None) -> Iterator[None]:
        """Cancel ``token`` if anyone requests cancellation of ``run_id`` while the block runs."""
        if token is None:
            yield
            return
        with self._lock:
            _token, count = self._watched.get(run_id, (token, 0))
            self._watched[run_id] = (token, count + 1)
            self._ensure_thread()
        try:
            yield
        finally:
            with self._lock:
                _token, count = self._watched[run_id]
                if count <= 1:
                    del self._watched[run_id]
                else:
                    self._watched[run_id] = (token, count - 1)

    def _ensure_thread(self) -> None:
        # A prefork pool child inherits the parent's object but not its threads.
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._poll, name="lg-cancel-watch", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stopped.wait(self.interval):
            with self._lock:
                watched = [(run_id, token) for run_id, (token, _count) in self._watched.items() if not token.cancelled]
            for run_id, token in watched:
                try:
                    _status, cancel, _holder = self.store.run_flags(run_id)
                except Exception:  # noqa: BLE001 - a missed poll only delays the cancel
                    continue
                if cancel:
                    self.on_cancel(run_id)
                    token.cancel("cancellation was requested")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop polling and wait for a poll in progress: the store may be closed next."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


__all__ = ["CancelWatch"]
