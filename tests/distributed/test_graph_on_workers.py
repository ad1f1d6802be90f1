"""Graph runs on real Celery workers: node steps on lg.orchestrate, child runs on the model and tool queues."""

from __future__ import annotations

import time

import graph_dist_app
import pytest

from lg_core import current_configuration
from lg_core.assemblies._step_attempts import attempt_child_id
from lg_core.assemblies.child_runs import child_run_id
from lg_core.errors import RunNotFoundError

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def test_a_graph_runs_on_workers_with_its_branches_at_once_and_each_side_effect_once(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    (dist.ready_dir / "meet-effect-2").write_text("3")  # the ledger and policy calls wait for each other
    (dist.ready_dir / "meet-effect-3").write_text("2")

    run = graph_dist_app.TransferGraph.start_execution("Why is transfer 481 pending?").wait(timeout=90)

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
    assert outer_node.attempts == 1  # parked once, woken by its child's ending (attempts start again), executed again


def test_cancelling_a_parked_graph_run_stops_its_child_and_ends_the_run_cancelled(dist):
    """No thread holds the parked node step: the cancel reaches the child, whose ending wakes the
    step, which ends the Graph run cancelled (no scheduler needed)."""
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)
    (dist.ready_dir / "hold-effect-1").touch()  # the triage node's tool call waits

    execution = graph_dist_app.TransferGraph.start_execution("Why is transfer 481 pending?")
    deadline = time.monotonic() + 60
    while not (dist.ready_dir / "held-effect-1").exists():
        assert time.monotonic() < deadline, "the triage node's tool call never started"
        time.sleep(0.05)
    execution.cancel()
    run = execution.wait(timeout=60)

    assert run.cancelled
    store = current_configuration().runtime().store
    [node] = [step for step in store.load_steps(run.id) if step.kind == "graph_node"]
    assert node.status == "cancelled"
    assert store.load_run(child_run_id(run.id, node.key)).status == "cancelled"


def test_an_execution_of_a_graph_on_workers_streams_agent_stream_wrappers_of_its_nodes(dist):
    """The node runs execute on other workers while the Graph's step is parked: their workers publish
    the wrappers to the Graph run's stream (and, nested, to every enclosing run's)."""
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = graph_dist_app.TransferGraph.start_execution("Why is transfer 481 pending?")
    events = list(execution.events())

    assert execution.wait(timeout=90).completed
    wrappers = [event for event in events if event.type == "agent_stream"]
    by_node = {event.data["source"].assembly_path[-1].participant: event for event in wrappers}
    assert set(by_node) == {"triage", "ledger", "policy", "respond"}
    source = by_node["triage"].data["source"]
    assert source.agent_id == graph_dist_app.GraphTriageAgent.agent_id
    assert source.parent_operation_id == execution.run_id
    assert [step.assembly_kind for step in source.assembly_path] == ["graph"]
    inner_types = [event.data["event"].type for event in wrappers]
    assert "invocation_start" in inner_types and "invocation_stop" in inner_types
    first_start = next(event for event in wrappers if event.data["event"].type == "invocation_start")
    assert first_start.data["input"] is not None
    with pytest.raises(TypeError):
        first_start.data["event"].data["x"] = 1

    nested = graph_dist_app.OuterTransferGraph.start_execution("Why is transfer 481 pending?")
    paths = {
        tuple(step.participant for step in event.data["source"].assembly_path)
        for event in nested.events()
        if event.type == "agent_stream"
    }
    assert nested.wait(timeout=90).completed
    assert paths == {("inner", "triage"), ("inner", "ledger"), ("inner", "policy"), ("inner", "respond")}


def test_an_execution_of_a_graph_on_workers_without_agent_events_streams_no_wrappers(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = graph_dist_app.OuterTransferGraph.start_execution(
        "Why is transfer 481 pending?", include_agent_events=False
    )
    types = [event.type for event in execution.events()]

    assert execution.wait(timeout=90).completed
    assert "agent_stream" not in types and types[-1] == "run_stop"


def test_a_node_that_times_out_is_retried_in_a_new_child_run_on_workers(dist):
    """The first attempt's child stops at its deadline; its ending wakes the parked node step, which
    starts the second attempt's child and parks again until that one answers."""
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    run = graph_dist_app.RetryingLookupGraph.start_execution("Why is transfer 481 pending?").wait(timeout=90)

    assert run.completed, run.error
    assert run.result.text == graph_dist_app.LOOKUP_ANSWER
    step = run.result.trajectory.find("lookup")
    assert [attempt.status for attempt in step.attempts] == ["timed_out", "completed"]
    assert "AssemblyStepTimeoutError" in step.attempts[0].error
    assert len(list(dist.ready_dir.glob("answered-lookup-*"))) == 1  # one retry, no duplicate attempt
    store = current_configuration().runtime().store
    [node] = [item for item in store.load_steps(run.id) if item.kind == "graph_node"]
    first = store.load_run(attempt_child_id(run.id, node.key, 1))
    second = store.load_run(attempt_child_id(run.id, node.key, 2))
    assert first.status == "partial"  # stopped at its attempt's deadline, not left running
    assert second.status == "completed"


def test_a_node_retried_after_its_retry_delay_holds_no_worker_thread_while_it_waits(dist, ticking_scheduler):
    """One thread serves every node step: while the delayed node waits out its retry_delay, another
    Graph runs to its end on that thread, and the scheduler's timer starts the retry afterwards."""
    dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=1)
    dist.start_workers(queues=("lg.model", "lg.tools"), pool="threads", concurrency=8)
    store = current_configuration().runtime().store

    delayed = graph_dist_app.DelayedRetryGraph.start_execution("Why is transfer 481 pending?")
    wait_until_parked_on_its_timer(store, delayed.run_id, "graph_node")
    other = graph_dist_app.TransferGraph.start_execution("Why is transfer 481 pending?").wait(timeout=90)
    run = delayed.wait(timeout=90)

    assert other.completed, other.error
    assert run.completed, run.error
    assert run.result.text == graph_dist_app.DELAYED_ANSWER
    first, second = run.result.trajectory.find("lookup").attempts
    assert [first.status, second.status] == ["failed", "completed"]
    assert (second.started_at - first.finished_at).total_seconds() >= graph_dist_app.RETRY_DELAY
    # The other Graph ended during the delay, on the one orchestrate thread the parked node did not hold.
    assert store.load_run(other.id).finished_at < second.started_at.timestamp()
    assert sum(ticking_scheduler) >= 1  # the retry was started by the scheduler's timer
    assert sorted(n for tool, n, _key in dist.calls() if tool == "effect") == [1, 2, 3, 4, 6]


def test_cancelling_a_run_whose_node_waits_out_its_retry_delay_ends_it_cancelled_with_no_retry(dist, ticking_scheduler):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=4)
    store = current_configuration().runtime().store

    execution = graph_dist_app.DelayedRetryGraph.start_execution("Why is transfer 481 pending?")
    key = wait_until_parked_on_its_timer(store, execution.run_id, "graph_node")
    execution.cancel()
    run = execution.wait(timeout=90)

    assert run.cancelled, run.outcome
    time.sleep(graph_dist_app.RETRY_DELAY + 1)  # past the timer: a closed step is not woken to retry
    with pytest.raises(RunNotFoundError):
        store.load_run(attempt_child_id(run.id, key, 2))
    assert [n for tool, n, _key in dist.calls() if tool == "effect"] == []


def wait_until_parked_on_its_timer(store, run_id: str, kind: str) -> str:
    """Until the step of ``kind``'s first attempt has failed and it waits, with no child, for its
    retry_delay; returns the step's key."""
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, "the step did not park on its retry_delay"
        steps = [step for step in store.load_steps(run_id) if step.kind == kind]
        if steps and steps[0].status == "waiting":
            key = steps[0].key
            if _stored_status(store, attempt_child_id(run_id, key, 1)) == "failed":
                if _stored_status(store, attempt_child_id(run_id, key, 2)) is None:
                    return key
        time.sleep(0.1)


def _stored_status(store, run_id: str) -> str | None:
    try:
        return str(store.load_run(run_id).status)
    except RunNotFoundError:
        return None
