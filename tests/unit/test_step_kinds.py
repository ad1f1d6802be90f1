"""The step-kind table (lg_core.engine.step_kinds) is the one place a kind is declared:
the worker tasks, their routes and the recovery sweeps are derived from it, so they agree
with it by construction. These tests pin the names queued messages and Flower depend on."""

from __future__ import annotations

from typing import get_args

from lg_core.engine.dispatcher import StepRef
from lg_core.engine.step_kinds import (
    ADVANCE_TASK,
    STEP_KINDS,
    StepKindName,
    is_step_kind,
    task_name_for,
)
from lg_core.store import NewStep
from lg_workers.queues import QUEUES, TASK_QUEUES, queue_for
from lg_workers.task_display import display_args, parse_display
from lg_workers.tasks import STEP_TASKS


def test_the_kinds_keep_their_task_and_queue_names():
    assert {name: (kind.task_name, kind.queue) for name, kind in STEP_KINDS.items()} == {
        "model": ("lg.model_turn", "lg.model"),
        "tool": ("lg.tool_call", "lg.tools"),
        "graph_node": ("lg.graph_node", "lg.orchestrate"),
        "code_exec": ("lg.code_exec", "lg.sandbox"),
        "workflow": ("lg.workflow", "lg.orchestrate"),
        "subagent_turn": ("lg.subagent_turn", "lg.orchestrate"),
    }


def test_a_graph_node_is_shown_to_monitoring_by_its_node_name():
    ref = StepRef.of("run-1", NewStep("root/node-2/billing", "run-1/root", "graph_node", {"node": "billing"}))

    assert ref.label == "billing"
    assert display_args(ref) == "node=billing run=run-1 step=root/node-2/billing"
    assert parse_display(display_args(ref)) == ("run-1", "root/node-2/billing")


def test_the_kind_name_literal_lists_exactly_the_table():
    assert set(get_args(StepKindName)) == set(STEP_KINDS)
    assert all(name == kind.name for name, kind in STEP_KINDS.items())


def test_every_kind_has_a_task_routed_to_a_known_queue():
    for name, kind in STEP_KINDS.items():
        assert STEP_TASKS[name].name == kind.task_name
        assert kind.queue in QUEUES
        assert queue_for(kind.task_name) == kind.queue


def test_routes_name_only_tasks_that_exist():
    assert set(TASK_QUEUES) == {ADVANCE_TASK, *(kind.task_name for kind in STEP_KINDS.values())}
    assert TASK_QUEUES[ADVANCE_TASK] == "lg.orchestrate"


def test_a_step_ref_names_its_kinds_task_and_lg_advance_for_any_other_kind():
    assert StepRef("r", "root/turn-0/model", "model", "r/root").task_name == "lg.model_turn"
    assert StepRef("r", "root/turn-0/tool/c1", "tool", "r/root").task_name == "lg.tool_call"
    assert task_name_for("once") == ADVANCE_TASK
    assert not is_step_kind("once") and is_step_kind("tool")


def test_a_step_task_takes_ids_only():
    task = STEP_TASKS["model"]
    assert task.run.__code__.co_varnames[: task.run.__code__.co_argcount] == ("self", "run_id", "step_key")
