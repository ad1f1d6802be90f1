"""Queues, their pools, and the routing of tasks to them.

| queue            | tasks                        | pool                         |
|------------------|------------------------------|------------------------------|
| lg.orchestrate   | lg.advance                   | prefork, small               |
| lg.model         | lg.model_turn                | threads, high concurrency    |
| lg.tools         | lg.tool_call                 | threads (prefork with --pool)|
| lg.sandbox       | none yet                     | prefork on Bubblewrap hosts  |

The routes come from the step-kind table (lg_core.engine.step_kinds): each
kind names its task and queue there, and ``lg.advance`` is the one task no
kind owns. A kind's queue must be one of ``QUEUES``.
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
POOLS = {
    ORCHESTRATE: ("prefork", 2),
    MODEL: ("threads", 64),
    TOOLS: ("threads", 16),
    SANDBOX: ("prefork", 2),
}


def queue_for(task_name: str) -> str:
    """The queue ``task_name`` is routed to (``lg.orchestrate`` for a task without a route)."""
    return TASK_QUEUES.get(task_name, ORCHESTRATE)


__all__ = ["ORCHESTRATE", "MODEL", "POOLS", "QUEUES", "SANDBOX", "TASK_QUEUES", "TOOLS", "queue_for"]
