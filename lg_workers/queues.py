"""Queues, their pools, and the routing of tasks to them.

| queue            | pool                          |
|------------------|-------------------------------|
| lg.orchestrate   | threads, small                |
| lg.model         | threads, high concurrency     |
| lg.tools         | threads (prefork with --pool) |
| lg.sandbox       | threads, on Bubblewrap hosts  |

Which task goes to which queue (``TASK_QUEUES``) comes from the step-kind
table (lg_core.engine.step_kinds): each kind names its task and queue there,
and ``lg.advance``, the one task no kind owns, goes to ``lg.orchestrate``. A
kind's queue must be one of ``QUEUES`` (tests/unit/test_step_kinds.py).
"""

from __future__ import annotations

from lg_core.engine.step_kinds import ADVANCE_QUEUE, task_routes

ORCHESTRATE = ADVANCE_QUEUE
MODEL = "lg.model"
TOOLS = "lg.tools"
SANDBOX = "lg.sandbox"
QUEUES = (ORCHESTRATE, MODEL, TOOLS, SANDBOX)

TASK_QUEUES = task_routes()  # task name -> queue

# The pool each queue wants, and its default concurrency per worker process.
# Tools share the model queue's thread pool by default: agent tools mostly wait
# on I/O, and one worker consuming both queues runs a model turn's tool call and
# the next turn in the same task (lg_workers.continuation) instead of a broker hop
# apiece. CPU-bound or crash-prone tools belong on `lg worker -Q lg.tools --pool prefork`.
# Orchestration is threads too: its tasks (publishing a run's open steps, a recovery
# pass) are a few store queries each, so with the default queues one Celery worker
# process serves all three instead of a prefork pool that sits idle most of the time.
POOLS = {
    ORCHESTRATE: ("threads", 2),
    MODEL: ("threads", 64),
    TOOLS: ("threads", 16),
    # Threads: each sandboxed program or tool is a bwrap child process anyway, and a code-mode
    # program outliving its exec stays a child of the worker process that started it, which
    # its wait and stop reach through that process's own queue (lg_workers.worker.consumed_queues).
    SANDBOX: ("threads", 8),
}


def queue_for(task_name: str) -> str:
    """The queue ``task_name`` is routed to (``lg.orchestrate`` for a task without a route)."""
    return TASK_QUEUES.get(task_name, ORCHESTRATE)


__all__ = ["ORCHESTRATE", "MODEL", "POOLS", "QUEUES", "SANDBOX", "TASK_QUEUES", "TOOLS", "queue_for"]
