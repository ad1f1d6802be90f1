"""Graph runs on real Celery workers: node steps on lg.orchestrate, child runs on the model and tool queues."""

from __future__ import annotations

import graph_dist_app
import pytest

from lg_core import current_configuration

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def test_a_graph_runs_on_workers_with_its_branches_at_once_and_each_side_effect_once(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    run = graph_dist_app.TransferGraph.ask("Why is transfer 481 pending?")

    assert run.completed, run.error
    assert run.result.text == graph_dist_app.ANSWERS["respond"]
    trajectory = run.result.trajectory
    assert [step.participant for step in trajectory][0] == "triage"
    assert trajectory.concurrent(trajectory.find("ledger"), trajectory.find("policy"))
    assert sorted(n for tool, n, _key in dist.calls() if tool == "effect") == [1, 2, 3, 4]
    steps = current_configuration().runtime().store.load_steps(run.id)
    assert [step.kind for step in steps].count("graph_node") == 4


def test_a_graph_node_that_is_a_graph_runs_as_a_nested_child_on_workers(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = graph_dist_app.OuterTransferGraph.start_execution("Why is transfer 481 pending?")
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    assert run.result.text == graph_dist_app.ANSWERS["respond"]
    assert run.result.trajectory.find("inner").assembly_kind == "graph"


def test_a_node_waiting_for_its_child_parks_and_holds_no_worker_thread(dist):
    """One thread serves every node step: the outer node's step must give it up while its child
    Graph runs, or the inner Graph's node steps could never run."""
    dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=1)
    dist.start_workers(queues=("lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = graph_dist_app.OuterTransferGraph.start_execution("Why is transfer 481 pending?")
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    store = current_configuration().runtime().store
    [outer_node] = [step for step in store.load_steps(run.id) if step.kind == "graph_node"]
    assert outer_node.status == "succeeded"
    assert outer_node.attempts == 2  # parked once, woken by its child's ending, executed again
