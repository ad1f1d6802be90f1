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
starts the child on the workers and *parks*: it commits as ``waiting`` (no holder,
no lease, out of the outbox), holding no thread, and the commit that ends the
child puts it back in the outbox in the same transaction (the child's row names
it: ``parent_run_id``, ``parent_step_key``). Executed again, it finds the child
ended and reads its result. The child carries the parent's deadline, and the
parent's ending asks its running children to stop.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from lg_core.errors import RunNotFoundError
from lg_core.run import Run

if TYPE_CHECKING:
    from lg_core.engine.driven_frames import StepScope
    from lg_core.store import RunRecord


def child_run_id(parent_run_id: str, step_key: str) -> str:
    """The id of the child run the step ``step_key`` of ``parent_run_id`` starts: the same for every attempt."""
    digest = hashlib.sha256(f"{parent_run_id}\n{step_key}".encode()).hexdigest()
    return f"{digest[:32]}"


def start_or_find_child(
    scope: StepScope,
    assembly: Any,
    message: Any,
    run_id: str,
    *,
    seen: dict[str, RunRecord] | None = None,
    **options: Any,
) -> Run | None:
    """The ended child run ``run_id`` of ``assembly`` asked ``message`` (started, resumed or read back),
    or None while it runs on workers: the step then parks until the child's ending wakes it.

    ``options`` are the child's own invocation fields (a Workflow call's history, context, or a
    deadline sooner than the parent's for its timeout). A child found ended is read back from its
    stored record, which is put in ``seen`` (when given) so the caller need not read it again."""
    runtime: Any = scope.engine.runtime
    record = _stored(runtime, run_id)
    if record is not None and record.finished:
        if seen is not None:
            seen[run_id] = record
        return Run.from_record(record, runtime)
    distributed = scope.holder is not None
    if record is None:
        parent = scope.run
        child = assembly.build_run(
            message,
            run_id=run_id,
            cancellation_token=parent.cancellation_token,  # the child's token is a child of the parent's
            runtime=runtime,
            **{"deadline_at": parent.invocation.deadline_at, **options},
        )
        child.parent_step = (parent.id, scope.key)
        if not distributed:
            return child.call()  # type: ignore[no-any-return]
        runtime.start_execution(child)
        return None
    if distributed:
        return None  # started by an earlier attempt, still running
    return runtime.resume(run_id)  # type: ignore[no-any-return]  # a crash left it unfinished


def ended_child(runtime: Any, run_id: str, *, seen: dict[str, RunRecord] | None = None) -> Run | None:
    """The child run ``run_id`` once it has ended, else None; its record put in ``seen`` as
    ``start_or_find_child`` puts it."""
    record = _stored(runtime, run_id)
    if record is None or not record.finished:
        return None
    if seen is not None:
        seen[run_id] = record
    return Run.from_record(record, runtime)


def _stored(runtime: Any, run_id: str) -> RunRecord | None:
    try:
        record: RunRecord = runtime.store.load_run(run_id)
    except RunNotFoundError:
        return None
    return record


__all__ = ["child_run_id", "ended_child", "start_or_find_child"]
