"""The task definitions: ids in, engine calls, ack.

Each task is the step protocol (look up, claim, execute, commit, publish) for
one step, implemented once in ``Engine.execute_claimed``; the body here only
finds this process's runtime, runs it and publishes what the commit scheduled,
except a successor this worker would take anyway, which it runs next in the
same task (lg_workers.continuation). Exceptions other than the run's own (which
the engine records as the run's outcome) are infrastructure failures: the task
raises (Celery then acknowledges its message), and the step comes back through
the engine's retry of a failed attempt or the scheduler's sweeps; a killed
worker's message is redelivered (acks_late). A step that could not be claimed
at all is sent again by the task itself (``run_step``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task

from lg_core.engine.dispatcher import StepRef
from lg_core.engine.leases import StepNotClaimed
from lg_core.engine.run_endings import take_ending
from lg_core.engine.step_kinds import ADVANCE_TASK, STEP_KINDS, StepKind
from lg_core.errors import RunNotFoundError
from lg_core.urls import safe_url
from lg_workers import faults
from lg_workers.celery_backend import PUBLISH_ERRORS
from lg_workers.child_starts import kept, take_kept
from lg_workers.continuation import Announcer, Chain, consumed_queues
from lg_workers.task_outcomes import RunFailed, task_result
from lg_workers.worker_runtime import worker_runtime

log = logging.getLogger("lg_workers.tasks")

CLAIM_RETRY_SECONDS = 1.0  # each try already waits 4-9 s for the store (retry_transient)
CLAIM_RETRIES = 60  # about 5-10 minutes of outage; after that the outbox relay sends the step


def run_step(run_id: str, step_key: str, redelivered: bool = True, task: Task | None = None) -> str:
    """Run the step, then each successor this worker would take anyway (lg_workers.continuation).

    ``task`` is the Celery task running this (None: no worker context, nothing
    runs inline). Returns what happened to the task's own step, and how many
    steps followed it here.

    A task whose step could not even be claimed (the run store was out of
    reach past its retries) is sent again after CLAIM_RETRY_SECONDS, up to
    CLAIM_RETRIES times: nothing of the step ran, and without this its step
    would wait for the outbox relay, ``relay_grace`` (30 s by default) after
    its dispatch, once the database is back.
    """
    runtime = worker_runtime()
    try:
        with runtime.backend.events.deferring():  # the chain's steps queue their events (streams)
            return _run_chain(runtime, run_id, step_key, redelivered, task)
    except StepNotClaimed as exc:
        own_step = (exc.run_id, exc.key) == (run_id, step_key)  # not a successor run inline after it
        if task is None or not own_step or task.request.retries >= CLAIM_RETRIES:
            raise
        log.warning("step %s of run %s: %s; sent again in %.0f s", step_key, run_id, exc, CLAIM_RETRY_SECONDS)
        raise task.retry(exc=exc, countdown=CLAIM_RETRY_SECONDS, max_retries=CLAIM_RETRIES) from exc


def _run_chain(runtime: Any, run_id: str, step_key: str, redelivered: bool, task: Task | None) -> str:
    chain = Chain(consumed_queues(task) if task is not None else frozenset())
    # Child runs the chain's steps start continue here too (lg_workers.child_starts).
    with kept(chain.queues, lambda refs: _publish_left(runtime, refs)):
        return _chain_steps(runtime, chain, run_id, step_key, redelivered, task)


def _publish_left(runtime: Any, refs: list[StepRef]) -> None:
    """Publish the child steps a chain kept and did not run. They are in the store's outbox since
    their runs started, so a broker out of reach leaves them to the scheduler's relay, as a child
    start would (CeleryBackend.start): the step that started them committed, and stays done."""
    try:
        runtime.backend.publish(refs)
    except PUBLISH_ERRORS as exc:
        log.warning("%d child step(s) wait for the scheduler's relay: the broker is unreachable (%s)", len(refs), exc)


def _chain_steps(runtime: Any, chain: Chain, run_id: str, step_key: str, redelivered: bool, task: Task | None) -> str:
    # chain.pick: each commit also claims the successor that runs next here (lg_core.engine._preclaim)
    outcome, successors = runtime.engine.execute_claimed(run_id, step_key, redelivered=redelivered, follow=chain.pick)
    successors = successors + take_kept()
    first, first_ending = outcome, take_ending()
    announcer = Announcer(task)
    while True:
        if outcome == "executed":
            faults.point("after_commit")  # test-only crash window (LG_FAULT); inert otherwise
        elif outcome == "missing":
            warn_if_unknown_run(runtime, run_id, step_key)
        following, others = chain.take(successors) if outcome == "executed" else (None, successors)
        runtime.backend.publish(others)
        if following is None:
            break
        run_id, step_key = following.run_id, following.key  # another run's, when an ending started the session's next
        announcer.start(following)
        try:
            outcome, successors = runtime.engine.execute_claimed(run_id, step_key, redelivered=False, follow=chain.pick)
            successors = successors + take_kept()
        except BaseException as exc:
            announcer.failed(exc)
            raise
        announcer.finished(outcome, take_ending())
    announcer.flush()
    inline = "" if chain.steps == 1 else f" +{chain.steps - 1} inline"  # short: Flower's result column
    if first_ending is not None and first_ending.failed:
        raise RunFailed(first_ending.summary + inline)
    return task_result(first, first_ending) + inline


def warn_if_unknown_run(runtime: Any, run_id: str, step_key: str) -> None:
    """Say so when a task names a run this worker's store does not hold.

    The process that started the run wrote it to another store (a different
    LG_RUN_STORE, or a relative SQLite path read from another directory): the
    step is dropped here, so the run would stay 'running' with nothing in any log.
    """
    try:
        runtime.store.load_run(run_id)
    except RunNotFoundError:
        log.warning(
            "step %s names run %s, which is not in this worker's run store %s; the process that started "
            "it uses another run_store: give every process (web app, workers, scheduler) the same LG_RUN_STORE",
            step_key,
            run_id,
            safe_url(runtime.configuration.run_store),
        )


def redelivered(task: Task) -> bool:
    """Did the broker deliver this message before (to a worker that died without acking it)?

    Only then may the step's commit have happened without its successors being
    published; a copy sent by the relay or a sweep is a fresh message.
    """
    return bool((task.request.delivery_info or {}).get("redelivered"))


def _step_task(kind: StepKind) -> Task:
    """The task that executes steps of ``kind``, under the kind's task name, with ids only as arguments."""

    def execute_step(self: Task, run_id: str, step_key: str) -> str:
        return run_step(run_id, step_key, redelivered(self), self)

    execute_step.__name__ = execute_step.__qualname__ = kind.task_name.rpartition(".")[2]
    execute_step.__doc__ = f"Execute one {kind.name} step ({kind.key_shape}) of a run."
    task: Task = shared_task(name=kind.task_name, bind=True, throws=(RunFailed,))(execute_step)
    return task


# One task per kind of the step-kind table (lg_core.engine.step_kinds), by kind name.
STEP_TASKS: dict[str, Task] = {name: _step_task(kind) for name, kind in STEP_KINDS.items()}


@shared_task(name=ADVANCE_TASK)
def advance(run_id: str) -> str:
    """Publish whatever the run needs now (its open steps): recovery and run start."""
    runtime = worker_runtime()
    steps = runtime.engine.open_steps(run_id)
    runtime.backend.publish(steps)
    return f"published {len(steps)}"


__all__ = ["STEP_TASKS", "advance", "redelivered", "run_step", "warn_if_unknown_run"]
