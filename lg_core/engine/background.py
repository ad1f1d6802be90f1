"""Embedded background execution: ``start_execution`` without a broker.

The run is persisted synchronously (so its id is valid the moment
``start_execution`` returns), then a thread of this process drives it. Its
events are kept in an in-process log so any number of readers can follow
them, resume from an id, or arrive late.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections import OrderedDict
from typing import Any, Protocol

from lg_core.errors import ERRORS_INCLUDING_CONTROL_FLOW
from lg_core.events import StreamEvent


class _DrivenRun(Protocol):
    """What the backend needs of the run it drives (an ``lg_core.run.Run``)."""

    @property
    def id(self) -> str: ...

    _phase: str

    def deliver(self, event: StreamEvent) -> None: ...

    def close(self) -> None: ...


class _DrivingRuntime(Protocol):
    """What the backend needs of its runtime (an ``lg_core.runtime.Runtime``)."""

    @property
    def engine(self) -> Any: ...

    @property
    def dispatcher(self) -> Any: ...

    def begin(self, run: Any) -> list[Any]: ...


class _RunLog:
    """Events of one run in order; position = index + 1.

    Blocking readers wait on the condition; async readers (``aread``) wait on a
    future of their loop, which ``append`` wakes, so an idle ``async for`` over
    the events holds no thread.
    """

    def __init__(self) -> None:
        self.events: list[StreamEvent] = []
        self.done = False
        self.condition = threading.Condition()
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def append(self, event: StreamEvent) -> None:
        with self.condition:
            self.events.append(event)
            self.done = self.done or event.terminal
            self.condition.notify_all()
            for loop, woken in self._async_waiters:
                with contextlib.suppress(RuntimeError):  # that loop closed; its reader is gone
                    loop.call_soon_threadsafe(_wake, woken)

    def covers(self, position: str) -> bool:
        return position.isdigit() and int(position) <= len(self.events)

    async def acovers(self, position: str) -> bool:
        return self.covers(position)

    def locate(self, seq: int) -> str | None:
        """As RedisLiveSource.locate: after event ``seq``, else just before event ``seq`` + 1."""
        with self.condition:
            seqs = [event.seq for event in self.events]
        if seq in seqs:
            return str(seqs.index(seq) + 1)
        return str(seqs.index(seq + 1)) if seq + 1 in seqs else None

    def end(self) -> str:
        with self.condition:
            return str(len(self.events))

    def read(self, position: str, block: float) -> list[tuple[str, StreamEvent]]:
        start = int(position) if position.isdigit() else 0
        with self.condition:
            if start >= len(self.events) and not self.done:
                self.condition.wait(block)
            return self._after(start)

    async def aread(self, position: str, block: float) -> list[tuple[str, StreamEvent]]:
        """:meth:`read` for async readers: the wait is on the loop, not on a worker thread."""
        start = int(position) if position.isdigit() else 0
        loop = asyncio.get_running_loop()
        waiter = (loop, loop.create_future())
        with self.condition:
            if start < len(self.events) or self.done:
                return self._after(start)
            self._async_waiters.append(waiter)
        try:
            await asyncio.wait([waiter[1]], timeout=block)
        finally:
            with self.condition:
                self._async_waiters.remove(waiter)
        with self.condition:
            return self._after(start)

    def _after(self, start: int) -> list[tuple[str, StreamEvent]]:
        return [(str(i + 1), event) for i, event in enumerate(self.events[start:], start=start)]


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


class LocalLiveLog:
    """Recent runs' event logs, bounded by count (oldest finished runs go first)."""

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._logs: OrderedDict[str, _RunLog] = OrderedDict()

    def open(self, run_id: str) -> _RunLog:
        with self._lock:
            log = self._logs.setdefault(run_id, _RunLog())
            while len(self._logs) > self._capacity:
                oldest = next((k for k, v in self._logs.items() if v.done), None)
                if oldest is None:
                    break
                del self._logs[oldest]
            return log

    def get(self, run_id: str) -> _RunLog | None:
        with self._lock:
            return self._logs.get(run_id)


class ThreadBackend:
    """Runs executions on threads of this process."""

    def __init__(self, runtime: _DrivingRuntime) -> None:
        self.runtime = runtime
        self.log = LocalLiveLog()
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def start(self, run: _DrivenRun) -> None:
        engine = self.runtime.engine
        log = self.log.open(run.id)
        unsubscribe_log = engine.bus.subscribe(run.id, log.append)
        unsubscribe_run = engine.bus.subscribe(run.id, run.deliver)
        try:
            refs = self.runtime.begin(run)
        except BaseException:
            unsubscribe_log()
            unsubscribe_run()
            raise

        def drive() -> None:
            try:
                # A run stored pending behind another run of its session waits here for its turn.
                self.runtime.dispatcher.drive(engine.when_active(run, refs))
            finally:
                unsubscribe_run()
                unsubscribe_log()
                run._phase = "finished"
                try:
                    run.close()
                except ERRORS_INCLUDING_CONTROL_FLOW:  # kept as run.cleanup_error; Execution.wait raises it
                    pass
                self._forget(run.id)

        # The thread inherits no context variables: it runs in the starter's, as ask() would.
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(drive,), name=f"lg-exec-{run.id[:8]}", daemon=True)
        with self._lock:
            # Registered and started under the lock: executes_here is true from the start
            # (Execution.run keeps the live Run), and wait_local never finds a thread it
            # cannot join yet (it raised RuntimeError for a wait from another thread).
            self._threads[run.id] = thread
            thread.start()

    def _forget(self, run_id: str) -> None:
        """Drop this finished thread's entry: nobody may ever wait for the run here (a batch
        follows its runs in the store), and a process starting many runs must not keep them all.

        Only this thread's own entry: a later execution of the run here registered its own.
        """
        with self._lock:
            if self._threads.get(run_id) is threading.current_thread():
                del self._threads[run_id]

    def check_reachable(self) -> None:
        """Threads of this process are always there."""

    def executes_here(self, run_id: str) -> bool:
        with self._lock:
            thread = self._threads.get(run_id)
        return thread is not None and thread.is_alive()

    def live_source(self, run_id: str) -> _RunLog | None:
        return self.log.get(run_id)

    def wait_local(self, run_id: str, timeout: float | None) -> bool:
        """Join the run's thread if it runs here; False when it does not."""
        with self._lock:
            thread = self._threads.get(run_id)
        if thread is None:
            return False
        started = time.monotonic()
        thread.join(timeout)
        if thread.is_alive():
            from lg_core.errors import DeadlineExceededError

            raise DeadlineExceededError(f"run {run_id} is still running after {time.monotonic() - started:.1f} s")
        with self._lock:
            self._threads.pop(run_id, None)
        return True

    def shutdown(self, timeout: float = 5.0) -> None:
        """Give the runs executing here ``timeout`` seconds in all to finish, then return.

        One budget for all of them, not one per run: a process stopped with
        Ctrl-C while 50 runs are mid-turn must exit in seconds, not minutes.
        A run still executing then is left to be resumed from its last commit.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


__all__ = ["LocalLiveLog", "ThreadBackend"]
