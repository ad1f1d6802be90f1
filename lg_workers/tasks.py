"""The task definitions: ids in, one engine call, ack.

Each task is the protocol of DESIGN 4.2 for one step, implemented once in
``Engine.execute_claimed``; the body here only finds this process's runtime,
runs it and publishes what the commit scheduled. Exceptions other than the
run's own (which the engine records as the run's outcome) are infrastructure
failures: the task raises, the message is not acknowledged (acks_late), and
the step is retried by redelivery or by the sweeper.
"""

from __future__ import annotations

from celery import shared_task

from lg_workers import faults
from lg_workers.runtime import worker_runtime


def run_step(run_id: str, step_key: str) -> str:
    runtime = worker_runtime()
    outcome, successors = runtime.engine.execute_claimed(run_id, step_key)
    if outcome == "executed":
        faults.point("after_commit")  # test-only crash window (LG_FAULT); inert otherwise
    runtime.backend.publish(successors)
    return outcome


@shared_task(name="lg.model_turn")
def model_turn(run_id: str, step_key: str) -> str:
    return run_step(run_id, step_key)


@shared_task(name="lg.tool_call")
def tool_call(run_id: str, step_key: str) -> str:
    return run_step(run_id, step_key)


@shared_task(name="lg.advance")
def advance(run_id: str) -> str:
    """Publish whatever the run needs now (its open steps): recovery and run start."""
    runtime = worker_runtime()
    steps = runtime.engine.open_steps(run_id)
    runtime.backend.publish(steps)
    return f"published {len(steps)}"


__all__ = ["advance", "model_turn", "run_step", "tool_call"]
