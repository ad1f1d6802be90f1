"""How an agent or assembly call runs for async callers: on a thread of its own, cancelled with its task.

``ask_async`` and ``AsyncRunStream`` (what ``stream_ask_async`` returns) run a Run on a dedicated thread (a run can take
minutes, and the loop's executor threads are few), build it off the loop, and cancel
it when the awaiting task is cancelled, so nothing of it keeps going unseen.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from lg_core.errors import CONTROL_FLOW_ERRORS
from lg_core.runtime import Runtime, current_runtime

if TYPE_CHECKING:
    from lg_core.agent import Agent
    from lg_core.run import Run

T = TypeVar("T")


def runtime_for(runtime: Any) -> Runtime:
    """The ``runtime=`` option, else the active configuration's; TypeError for anything else.

    A Configuration passed by mistake failed later with an AttributeError
    ('no attribute resolver'), far from the call that passed it.
    """
    if runtime is None:
        return current_runtime()
    if not isinstance(runtime, Runtime):
        raise TypeError(
            f"runtime must be a Runtime (a configuration's is configuration.runtime()), got {type(runtime).__name__}"
        )
    return runtime


def on_own_thread(fn: Callable[[], T], name: str) -> asyncio.Future[T]:
    """``fn()`` on a thread of its own (with the caller's context), as a future of the running loop.

    A run can take minutes. On the loop's default executor (``cpu_count + 4``
    threads) a few runs would hold every thread, and every ``asyncio.to_thread``
    of the app, LittleGhost's own store reads, ``cancel_async`` and
    ``interject_async`` included, would wait for one of those runs to end.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.cancelled():
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def target() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (context.run(fn), None)
        except BaseException as exc:  # noqa: BLE001 - raised where the future is awaited
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed without awaiting the future
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


async def built_off_the_loop(cls: type[Agent], message: Any, options: dict[str, Any]) -> Run:
    """``cls.build_run(message, **options)`` on a worker thread.

    If the awaiting task is cancelled meanwhile, the build still finishes on its
    thread; the Run it makes never starts, so what its hooks registered
    (``prepare_run``) is closed instead of being left open: by this side if the
    build had finished, else by the thread when it does.
    """
    lock, built, abandoned = threading.Lock(), [], threading.Event()

    def build() -> Run:
        run = cls.build_run(message, **options)
        with lock:
            if not abandoned.is_set():
                built.append(run)
                return run
        close_unstarted(run)
        return run

    try:
        return await asyncio.to_thread(build)
    except asyncio.CancelledError:
        with lock:
            abandoned.set()
            finished = list(built)
        for run in finished:
            close_unstarted(run)
        raise


def close_unstarted(run: Run) -> None:
    """Close a Run nobody will start, on a thread of its own: closers may block, and nobody
    is left to raise their error to."""

    def close() -> None:
        with contextlib.suppress(Exception, *CONTROL_FLOW_ERRORS):
            run.close()

    threading.Thread(target=close, name=f"lg-close-{run.id[:8]}", daemon=True).start()


async def until_stopped(run: Run, work: Awaitable[Run]) -> Run:
    """Await ``work``, the thread executing ``run``; if the awaiting task is cancelled, cancel the run.

    Without this a dropped web request or an ``asyncio.timeout`` would leave the
    run (and its tools' side effects) going on a thread, with nobody to see its
    outcome. The run is awaited before the CancelledError goes on, so nothing of
    it is still running when the caller's cancellation completes.
    """
    future = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.to_thread(run.cancel, "the task awaiting ask_async was cancelled")
        await asyncio.wait([future])
        raise


class AsyncRunStream:
    """Async iteration over a Run's events; the Run executes on a worker thread."""

    def __init__(self, run: Run) -> None:
        self.run = run

    async def __aiter__(self) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Any] = asyncio.Queue()
        done = object()
        iterator = iter(self.run)

        def pump() -> None:
            try:
                for event in iterator:
                    loop.call_soon_threadsafe(events.put_nowait, event)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
                loop.call_soon_threadsafe(events.put_nowait, exc)
            finally:
                loop.call_soon_threadsafe(events.put_nowait, done)

        task = on_own_thread(pump, f"lg-stream-{self.run.id[:8]}")
        try:
            while True:
                item = await events.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            # Stopping at the terminal event stops nothing; cancelling writes the store's flag: not on the loop.
            if not task.done() and not self.run.finished:
                await asyncio.to_thread(self.run.cancel, "the async stream consumer stopped reading")
            await task


__all__ = [
    "AsyncRunStream",
    "built_off_the_loop",
    "close_unstarted",
    "on_own_thread",
    "runtime_for",
    "until_stopped",
]
