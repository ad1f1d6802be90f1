"""Queues, task names and routing.

| queue            | tasks                        | pool                         |
|------------------|------------------------------|------------------------------|
| lg.orchestrate   | lg.advance, lg.recover       | threads, small               |
| lg.model         | lg.model_turn                | threads, high concurrency    |
| lg.tools         | lg.tool_call                 | threads (prefork with --pool)|
| lg.sandbox       | lg.code_exec, sandboxed tools| prefork on Bubblewrap hosts  |
"""

from __future__ import annotations

ORCHESTRATE = "lg.orchestrate"
MODEL = "lg.model"
TOOLS = "lg.tools"
SANDBOX = "lg.sandbox"
QUEUES = (ORCHESTRATE, MODEL, TOOLS, SANDBOX)

TASK_QUEUES = {
    "lg.advance": ORCHESTRATE,
    "lg.model_turn": MODEL,
    "lg.tool_call": TOOLS,
    "lg.graph_node": ORCHESTRATE,
    "lg.subagent_turn": MODEL,
    "lg.code_exec": SANDBOX,
}

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
    SANDBOX: ("prefork", 2),
}


def queue_for(task_name: str) -> str:
    return TASK_QUEUES.get(task_name, ORCHESTRATE)


__all__ = ["ORCHESTRATE", "MODEL", "POOLS", "QUEUES", "SANDBOX", "TASK_QUEUES", "TOOLS", "queue_for"]
