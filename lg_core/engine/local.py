"""LocalDispatcher: runs a run's steps in this process (embedded mode, DESIGN 4.7).

The caller's thread drives the run. A step with one successor runs inline (no
thread hop); independent successors (the tool calls of one turn) run in
parallel on a shared thread pool, and each completion feeds its own
successors back in. Nothing here decides what runs next: that is the engine's
commit, exactly as with Celery.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from lg_core.engine.dispatcher import StepRef

if TYPE_CHECKING:
    from lg_core.engine.engine import Engine


class LocalDispatcher:
    def __init__(self, engine: Engine, max_workers: int = 8) -> None:
        self.engine = engine
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="lg-step")

    def drive(self, refs: list[StepRef]) -> None:
        """Execute ``refs`` and everything they lead to, until nothing is left."""
        ready: deque[StepRef] = deque(refs)
        in_flight: set[Future[list[StepRef]]] = set()
        failure: BaseException | None = None
        while ready or in_flight:
            if not in_flight and len(ready) == 1 and failure is None:
                try:
                    ready.extend(self.engine.execute(ready.popleft()))
                except BaseException as exc:  # noqa: BLE001 - re-raised once the run is quiet
                    failure = exc
                continue
            while ready and failure is None:
                in_flight.add(self._pool.submit(self.engine.execute, ready.popleft()))
            ready.clear()
            if not in_flight:
                break
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                in_flight.discard(future)
                try:
                    ready.extend(future.result())
                except BaseException as exc:  # noqa: BLE001
                    failure = failure or exc
        if failure is not None:
            raise failure

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["LocalDispatcher"]
