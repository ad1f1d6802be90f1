"""A step's child run: started once under an id derived from the step, then waited for to its end.

A step that runs another assembly (a Graph node's Agent, Workflow, Swarm or Graph)
runs it as a run of its own, so the child is durable, resumable and visible in
``lg runs`` like any run. Its id is derived from the parent run's id and the step's
key: a step executed again (its worker died, its lease expired) finds the child
the first attempt started instead of starting a second one, and reads its result
when it has ended.

How the step waits depends on where it runs. A local step (``ask`` without a
broker) drives the child on its own thread, nested on the runtime's dispatcher;
a child left unfinished by a crashed process is resumed here. A worker's step
starts the child on the workers and waits for its end, reading the store, while
its own lease is kept alive and the parent's cancel and deadline are checked:
a cancelled parent cancels the child, and the child carries the parent's
deadline. That wait holds one thread of the ``lg.orchestrate`` pool; the step
does not park.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

from lg_core.errors import CancelledError, DeadlineExceededError, RunNotFoundError
from lg_core.run import Run

if TYPE_CHECKING:
    from lg_core.engine.driven_frames import StepScope
    from lg_core.store import RunRecord

_FIRST_POLL_SECONDS = 0.02
_MAX_POLL_SECONDS = 0.5


def child_run_id(parent_run_id: str, step_key: str) -> str:
    """The id of the child run the step ``step_key`` of ``parent_run_id`` starts: the same for every attempt."""
    digest = hashlib.sha256(f"{parent_run_id}\n{step_key}".encode()).hexdigest()
    return f"{digest[:32]}"


def run_child(scope: StepScope, assembly: Any, message: str, run_id: str) -> Run:
    """The finished child run ``run_id`` of ``assembly`` asked ``message``: started, resumed or read back."""
    runtime: Any = scope.engine.runtime
    record = _stored(runtime, run_id)
    if record is not None and record.finished:
        return Run.from_record(record, runtime)
    distributed = scope.holder is not None
    if record is None:
        parent = scope.run
        child = assembly.build_run(
            message,
            run_id=run_id,
            deadline_at=parent.invocation.deadline_at,
            cancellation_token=parent.cancellation_token,  # the child's token is a child of the parent's
            runtime=runtime,
        )
        if not distributed:
            return child.call()  # type: ignore[no-any-return]
        runtime.start_execution(child)
    elif not distributed:
        return runtime.resume(run_id)  # type: ignore[no-any-return]  # a crash left it unfinished
    return _wait_for(scope, runtime, run_id)


def _stored(runtime: Any, run_id: str) -> RunRecord | None:
    try:
        record: RunRecord = runtime.store.load_run(run_id)
    except RunNotFoundError:
        return None
    return record


def _wait_for(scope: StepScope, runtime: Any, run_id: str) -> Run:
    """Wait, reading the store, for the child executing on workers to end; its parent's stop stops it."""
    delay = _FIRST_POLL_SECONDS
    while True:
        try:
            scope.check_interrupt()
        except (CancelledError, DeadlineExceededError) as stop:
            runtime.cancel(run_id, f"its parent run {scope.run.id} stopped: {type(stop).__name__}")
            raise
        record = runtime.store.load_run(run_id)
        if record.finished:
            return Run.from_record(record, runtime)
        time.sleep(delay)
        delay = min(delay * 1.5, _MAX_POLL_SECONDS)


__all__ = ["child_run_id", "run_child"]
