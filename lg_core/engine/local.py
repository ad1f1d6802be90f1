"""LocalDispatcher: runs a run's steps in this process (embedded mode, no broker).

The caller's thread drives the run. A step with one successor runs inline (no
thread hop); independent successors (the tool calls of one turn) run in
parallel on a shared thread pool, and each completion feeds its own
successors back in. Nothing here decides what runs next: that is the engine's
commit, exactly as with Celery.

A run may be driven from one of the pool's own threads: a tool that asks
another agent (``Inner.ask(...)``) on the same runtime. Such a drive must not
just wait for its steps to get a pool thread, since every thread may be held
by a tool waiting like it (a batch as wide as the pool), and none would ever
be freed. It waits briefly, then runs a step still queued in its own thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from lg_core.engine.dispatcher import StepRef

if TYPE_CHECKING:
    from lg_core.engine.engine import Engine

HELP_AFTER_SECONDS = 0.05  # how long a drive on a pool thread waits before running a queued step itself
_pool_thread = threading.local()


def _mark_pool_thread() -> None:
    _pool_thread.active = True


def _in_this_context(function: Callable[[StepRef], list[StepRef]]) -> Callable[[StepRef], list[StepRef]]:
    """``function`` run in a copy of the calling thread's context variables.

    Pool threads inherit none, so a tool of a parallel batch saw the process
    default configuration and none of the application's context, unlike the
    same tool called alone (inline, on the driving thread). One copy per step:
    a Context cannot be entered by two threads at once.
    """
    # Typed as what it returns here: mypy's partial cannot bind Context.run's ParamSpec callable.
    run: Callable[..., list[StepRef]] = contextvars.copy_context().run
    return functools.partial(run, function)


def _event_loop_running() -> bool:
    """Is an asyncio event loop running on this thread (a sync ``ask()`` inside a coroutine)?

    A step must not run on such a thread: an async tool, callback or prompt runs
    with ``asyncio.run``, which refuses to start there, so a turn with one tool
    call failed its tool ("internal error") while the same call in a parallel
    batch, on pool threads, succeeded. The drive then sends every step to the
    pool and waits (the loop is blocked either way: that is what a sync call does).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class LocalDispatcher:
    def __init__(self, engine: Engine[Any], max_workers: int = 8) -> None:
        self.engine = engine
        self._pool = ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="lg-step", initializer=_mark_pool_thread
        )

    def drive(self, refs: list[StepRef]) -> None:
        """Execute ``refs`` and everything they lead to, until nothing is left."""
        ready: deque[StepRef] = deque(refs)
        in_flight: dict[Future[list[StepRef]], StepRef] = {}
        failure: BaseException | None = None
        nested = getattr(_pool_thread, "active", False)
        inline = not _event_loop_running()
        while ready or in_flight:
            if inline and not in_flight and len(ready) == 1 and failure is None:
                try:
                    ready.extend(self.engine.execute(ready.popleft()))
                except BaseException as exc:  # noqa: BLE001 - re-raised once the run is quiet
                    failure = exc
                continue
            while ready and failure is None:
                ref = ready.popleft()
                in_flight[self._pool.submit(_in_this_context(self.engine.execute), ref)] = ref
            ready.clear()
            if not in_flight:
                break
            done, _ = wait(in_flight, timeout=HELP_AFTER_SECONDS if nested else None, return_when=FIRST_COMPLETED)
            if not done:
                failure = self._run_a_queued_step(in_flight, ready, failure)
            for future in done:
                in_flight.pop(future)
                try:
                    ready.extend(future.result())
                except BaseException as exc:  # noqa: BLE001
                    failure = failure or exc
        if failure is not None:
            raise failure

    def _run_a_queued_step(
        self, in_flight: dict[Future[list[StepRef]], StepRef], ready: deque[StepRef], failure: BaseException | None
    ) -> BaseException | None:
        """Run here one step no pool thread has picked up yet (a drive on a pool thread); returns the failure."""
        for future, ref in list(in_flight.items()):
            if future.cancel():  # not started: it is ours to run now
                del in_flight[future]
                try:
                    ready.extend(self.engine.execute(ref))
                except BaseException as exc:  # noqa: BLE001 - re-raised once the run is quiet
                    return failure or exc
                return failure
        return failure

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["LocalDispatcher"]
