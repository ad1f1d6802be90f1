"""The step-kind table: every kind of step the engine executes, and where each is routed.

A kind is one module declaring a ``StepKind`` (lg_core.engine._step_kind):
its stored name, the shape of its step keys, the Celery task that executes
it and the queue that task is routed to (plain strings: lg_core never imports
Celery), how its body executes and how its result becomes a transition.
``STEP_KINDS`` below registers them. Everything else reads this table: the
engine picks a step's body by its kind, ``lg_workers.tasks`` defines one task
per kind, ``lg_workers.queues`` routes each kind's task to its queue, and
``lg_scheduler.recovery`` re-sends the steps of these kinds (and wakes a run
through ``lg.advance`` for a step of any other kind).

Adding a kind (a graph node, a subagent turn, code execution) is adding its
module and one entry here, with its literal name in ``StepKindName``. A kind
adds its route here, with its task: no route exists for a task name no kind
declares, so a route never names a task no worker has.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, TypeGuard

from lg_core.engine._code_exec import CODE_EXEC_KIND
from lg_core.engine._model_turn import MODEL_TURN
from lg_core.engine._step_kind import StepKind
from lg_core.engine._tool_call import TOOL_CALL
from lg_core.engine.graph_nodes import GRAPH_NODE
from lg_core.engine.subagent_turns import SUBAGENT_TURN
from lg_core.engine.workflow_steps import WORKFLOW

StepKindName = Literal["model", "tool", "graph_node", "code_exec", "workflow", "subagent_turn"]

STEP_KINDS: Mapping[str, StepKind] = MappingProxyType(
    {kind.name: kind for kind in (MODEL_TURN, TOOL_CALL, GRAPH_NODE, CODE_EXEC_KIND, WORKFLOW, SUBAGENT_TURN)}
)

# The orchestration task no kind owns: it publishes whatever a run needs now (recovery, a run's start).
ADVANCE_TASK = "lg.advance"
ADVANCE_QUEUE = "lg.orchestrate"


def is_step_kind(name: str) -> TypeGuard[StepKindName]:
    """Is ``name`` (a stored step's kind) a kind the engine executes?"""
    return name in STEP_KINDS


def task_name_for(kind: str) -> str:
    """The Celery task that executes a step of ``kind``; ``lg.advance`` for a kind without one."""
    entry = STEP_KINDS.get(kind)
    return ADVANCE_TASK if entry is None else entry.task_name


def task_routes() -> dict[str, str]:
    """Every task name and its queue: ``lg.advance``'s and each kind's."""
    return {ADVANCE_TASK: ADVANCE_QUEUE, **{kind.task_name: kind.queue for kind in STEP_KINDS.values()}}


__all__ = [
    "ADVANCE_QUEUE",
    "ADVANCE_TASK",
    "STEP_KINDS",
    "StepKind",
    "StepKindName",
    "is_step_kind",
    "task_name_for",
    "task_routes",
]
