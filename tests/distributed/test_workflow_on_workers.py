"""Workflow runs on real Celery workers: the perform step on lg.orchestrate, parked while its children run."""

from __future__ import annotations

import time

import pytest
import workflow_dist_app

from lg_core import current_configuration

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def _effects(dist) -> list[int]:
    return sorted(n for tool, n, _key in dist.calls() if tool == "effect")


def test_a_workflow_runs_on_workers_with_its_parallel_calls_at_once_and_each_side_effect_once(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    (dist.ready_dir / "meet-effect-2").write_text("3")  # the ledger and policy calls wait for each other
    (dist.ready_dir / "meet-effect-3").write_text("2")

    run = workflow_dist_app.TransferWorkflow.start_execution("Why is transfer 481 pending?").wait(timeout=90)

    assert run.completed, run.error
    assert run.result.text == workflow_dist_app.ANSWERS["respond"]
    trajectory = run.result.trajectory
    assert [step.participant for step in trajectory] == ["triage", "ledger", "policy", "respond"]
    assert trajectory.concurrent(trajectory.find("ledger"), trajectory.find("policy"))
    assert _effects(dist) == [1, 2, 3, 4]
    steps = current_configuration().runtime().store.load_steps(run.id)
    assert [(step.key, step.status) for step in steps if step.kind == "workflow"] == [("root/perform", "succeeded")]


def test_a_perform_step_waiting_for_children_holds_no_worker_thread(dist):
    """One thread serves lg.orchestrate: the Workflow's step must give it up while its children run,
    or the Graph's node step (and the children's own steps) could never run."""
    dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=1)
    dist.start_workers(queues=("lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = workflow_dist_app.WorkflowInGraph.start_execution("Why is transfer 481 pending?")
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    assert run.result.text == workflow_dist_app.ANSWERS["respond"]
    assert run.result.trajectory.find("flow").assembly_kind == "workflow"
    assert _effects(dist) == [1, 2, 3, 4]


def test_a_graph_called_by_a_workflow_runs_as_its_child_with_one_orchestration_thread(dist):
    dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=1)
    dist.start_workers(queues=("lg.model", "lg.tools"), pool="threads", concurrency=8)

    run = workflow_dist_app.GraphInWorkflow.start_execution("Why is transfer 481 pending?").wait(timeout=90)

    assert run.completed, run.error
    assert run.result.text == workflow_dist_app.ANSWERS["respond"]
    assert run.result.trajectory.find("graph").assembly_kind == "graph"
    assert _effects(dist) == [1, 2, 3, 4]


def test_parallel_calls_bounded_to_one_run_one_after_another_on_workers(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    run = workflow_dist_app.OneAtATimeWorkflow.start_execution("Why is transfer 481 pending?").wait(timeout=90)

    assert run.completed, run.error
    trajectory = run.result.trajectory
    assert not trajectory.concurrent(trajectory.find("ledger"), trajectory.find("policy"))
    assert _effects(dist) == [2, 3, 4]


def test_a_perform_step_woken_more_times_than_max_step_attempts_completes(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    run = workflow_dist_app.LongWorkflow.start_execution("0").wait(timeout=90)

    assert run.completed, run.error
    assert run.result.text == str(workflow_dist_app.LONG_CALLS)
    assert len(run.result.trajectory) == workflow_dist_app.LONG_CALLS


def test_cancelling_a_parked_workflow_run_stops_its_child_and_ends_the_run_cancelled(dist):
    """No thread holds the parked perform step: the cancel reaches the child, whose ending wakes the
    step, which ends the Workflow run cancelled (no scheduler needed)."""
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)
    (dist.ready_dir / "hold-effect-1").touch()  # the triage call's tool call waits

    execution = workflow_dist_app.TransferWorkflow.start_execution("Why is transfer 481 pending?")
    deadline = time.monotonic() + 60
    while not (dist.ready_dir / "held-effect-1").exists():
        assert time.monotonic() < deadline, "the triage call's tool call never started"
        time.sleep(0.05)
    execution.cancel()
    run = execution.wait(timeout=60)

    assert run.cancelled
    store = current_configuration().runtime().store
    [step] = [step for step in store.load_steps(run.id) if step.kind == "workflow"]
    assert step.status == "cancelled"
    children = [record for record in store.list_runs() if record.id != run.id]
    assert [child.status for child in children] == ["cancelled"]


def test_an_execution_of_a_workflow_in_a_graph_on_workers_streams_every_calls_wrappers(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = workflow_dist_app.WorkflowInGraph.start_execution("Why is transfer 481 pending?")
    wrappers = [event for event in execution.events() if event.type == "agent_stream"]

    assert execution.wait(timeout=90).completed
    paths = {tuple(step.participant for step in event.data["source"].assembly_path) for event in wrappers}
    assert paths == {("flow", "triage"), ("flow", "ledger"), ("flow", "policy"), ("flow", "respond")}
    kinds = {tuple(step.assembly_kind for step in event.data["source"].assembly_path) for event in wrappers}
    assert kinds == {("graph", "workflow")}
    respond = [event for event in wrappers if event.data["source"].assembly_path[-1].participant == "respond"]
    assert respond[0].data["event"].type == "invocation_start"
    assert [event.data["event"].type for event in respond].count("invocation_stop") == 1


def test_a_call_retried_after_its_retry_delay_holds_no_worker_thread_while_it_waits(dist, ticking_scheduler):
    """While the perform step waits out a call's retry_delay on the one orchestrate thread, another
    Workflow runs to its end there; the scheduler's timer wakes the step to start the retry."""
    dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=1)
    dist.start_workers(queues=("lg.model", "lg.tools"), pool="threads", concurrency=8)
    store = current_configuration().runtime().store

    delayed = workflow_dist_app.DelayedRetryWorkflow.start_execution("Why is transfer 481 pending?")
    deadline = time.monotonic() + 60
    while not _parked_after_a_failed_attempt(store, delayed.run_id):
        assert time.monotonic() < deadline, "the perform step did not park on its retry_delay"
        time.sleep(0.1)
    other = workflow_dist_app.TransferWorkflow.start_execution("Why is transfer 481 pending?").wait(timeout=90)
    run = delayed.wait(timeout=90)

    assert other.completed, other.error
    assert run.completed, run.error
    first, second = run.result.trajectory.steps[0].attempts
    assert [first.status, second.status] == ["failed", "completed"]
    assert (second.started_at - first.finished_at).total_seconds() >= workflow_dist_app.RETRY_DELAY
    assert store.load_run(other.id).finished_at < second.started_at.timestamp()
    assert sum(ticking_scheduler) >= 1
    assert _effects(dist) == [1, 2, 3, 4, 6]


def _parked_after_a_failed_attempt(store, run_id: str) -> bool:
    """Whether the perform step waits with its call's first attempt failed and no second one started."""
    steps = [step for step in store.load_steps(run_id) if step.kind == "workflow"]
    children = [record for record in store.list_runs() if record.parent_run_id == run_id]
    return bool(steps) and steps[0].status == "waiting" and [child.status for child in children] == ["failed"]
