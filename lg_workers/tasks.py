"""The task definitions: ids in, one engine call, ack.

Each task is the protocol of DESIGN 4.2 for one step, implemented once in
``Engine.execute_claimed``; the body here only finds this process's runtime,
runs it and publishes what the commit scheduled. Exceptions other than the
run's own (which the engine records as the run's outcome) are infrastructure
failures: the task raises, the message is not acknowledged (acks_late), and
the step is retried by redelivery or by the sweeper.
"""

from __future__ import annotations

from celery import Task, shared_task

from lg_workers import faults
from lg_workers.runtime import worker_runtime


def run_step(run_id: str, step_key: str, redelivered: bool = True) -> str:
    runtime = worker_runtime()
    outcome, successors = runtime.engine.execute_claimed(run_id, step_key, redelivered=redelivered)
    if outcome == "executed":
        faults.point("after_commit")  # test-only crash window (LG_FAULT); inert otherwise
    runtime.backend.publish(successors)
    return outcome


def redelivered(task: Task) -> bool:
    """Did the broker deliver this message before (to a worker that died without acking it)?

    Only then may the step's commit have happened without its successors being
    published; a copy sent by the relay or a sweep is a fresh message.
    """
    return bool((task.request.delivery_info or {}).get("redelivered"))


@shared_task(name="lg.model_turn", bind=True)
def model_turn(self: Task, run_id: str, step_key: str) -> str:
    return run_step(run_id, step_key, redelivered(self))


@shared_task(name="lg.tool_call", bind=True)
def tool_call(self: Task, run_id: str, step_key: str) -> str:
    return run_step(run_id, step_key, redelivered(self))


@shared_task(name="lg.advance")
def advance(run_id: str) -> str:
    """Publish whatever the run needs now (its open steps): recovery and run start."""
    runtime = worker_runtime()
    steps = runtime.engine.open_steps(run_id)
    runtime.backend.publish(steps)
    return f"published {len(steps)}"


__all__ = ["advance", "model_turn", "redelivered", "run_step", "tool_call"]
