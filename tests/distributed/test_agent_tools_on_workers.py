"""Agents and assemblies as tools on real Celery workers: each tool call's step starts its child run
on the workers and parks, holding no thread, until the child's ending wakes it to commit the answer."""

from __future__ import annotations

import time

import agent_tools_dist_app
import graph_dist_app
import pytest

from lg_core import current_configuration
from lg_core.assemblies.child_runs import child_run_id

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

TOOL_STEPS = {"root/turn-0/tool/sentiment": "classify_sentiment", "root/turn-0/tool/investigate": "investigate"}


def _tool_results(run) -> dict[str, str]:
    blocks = [block for message in run.result.messages if message.role == "tool" for block in message.content]
    return {block.tool_use_id: block.content[0].text for block in blocks}


def _assert_completed_once(dist, run) -> None:
    assert run.completed, run.error
    assert run.response == agent_tools_dist_app.ANSWER
    assert _tool_results(run) == {
        "sentiment": agent_tools_dist_app.SENTIMENT,
        "investigate": graph_dist_app.ANSWERS["respond"],
    }
    keys: dict[int, set[str]] = {}
    for tool, n, key in dist.calls():
        if tool == "effect":
            keys.setdefault(n, set()).add(key)
    assert {n: len(found) for n, found in keys.items()} == {1: 1, 2: 1, 3: 1, 4: 1, 11: 1}, dist.calls()
    for callback in ("admit", "answered"):  # once per call, though each step ran again when woken
        assert sorted(key for name, _n, key in dist.calls() if name == callback) == ["investigate", "sentiment"]
    store = current_configuration().runtime().store
    for key in TOOL_STEPS:
        child = store.load_run(child_run_id(run.id, key))
        assert child.status == "completed"
        assert (child.parent_run_id, child.parent_step_key) == (run.id, key)


def test_an_agent_calls_an_agent_and_a_graph_as_tools_on_workers(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    run = agent_tools_dist_app.CoordinatorAgent.start_execution("My transfer is stuck!").wait(timeout=90)

    _assert_completed_once(dist, run)
    assert run.usage.total_tokens > 0
    children = [current_configuration().runtime().get_run(child_run_id(run.id, key)) for key in TOOL_STEPS]
    assert run.usage.input_tokens > sum(child.usage.input_tokens for child in children) > 0  # summed in


def test_parked_tool_calls_hold_no_worker_thread(dist):
    """One thread serves every tool call and one every node step: each parent tool call must give its
    thread up while its child runs, or the children's own tool calls could never run."""
    dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=1)
    dist.start_workers(queues=("lg.tools",), pool="threads", concurrency=1)
    dist.start_workers(queues=("lg.model",), pool="threads", concurrency=4)

    run = agent_tools_dist_app.CoordinatorAgent.start_execution("My transfer is stuck!").wait(timeout=90)

    _assert_completed_once(dist, run)
    store = current_configuration().runtime().store
    steps = {step.key: step for step in store.load_steps(run.id)}
    assert all(steps[key].status == "succeeded" for key in TOOL_STEPS)


def test_the_tool_childrens_events_reach_the_parents_execution_as_agent_stream_wrappers(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = agent_tools_dist_app.CoordinatorAgent.start_execution(
        "My transfer is stuck!", include_agent_events=True
    )
    events = list(execution.events())

    assert execution.wait(timeout=90).completed
    sources = [event.data["source"] for event in events if event.type == "agent_stream"]
    sentiment = [s for s in sources if s.agent_id == agent_tools_dist_app.ToolSentimentAgent.agent_id]
    assert sentiment and all(s.assembly_path == () for s in sentiment)  # no composite step encloses it
    assert {s.operation_id for s in sentiment} == {child_run_id(execution.run_id, "root/turn-0/tool/sentiment")}
    graph_paths = {tuple(step.participant for step in s.assembly_path) for s in sources if s.assembly_path}
    assert graph_paths == {("triage",), ("ledger",), ("policy",), ("respond",)}
    # A step woken after parking goes on with the call it started: announced once.
    starts = [event.data["id"] for event in events if event.type == "tool_execution_start"]
    assert sorted(starts) == ["investigate", "sentiment"]


def test_cancelling_a_run_parked_in_a_tool_call_stops_the_child_and_ends_the_run_cancelled(dist):
    """No thread holds the parked tool-call step: the cancel reaches the child, whose ending wakes
    the step, which ends the coordinator's run cancelled (no scheduler needed)."""
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)
    (dist.ready_dir / "hold-effect-11").touch()  # the sentiment child's tool call waits

    execution = agent_tools_dist_app.CoordinatorAgent.start_execution("My transfer is stuck!")
    deadline = time.monotonic() + 60
    while not (dist.ready_dir / "held-effect-11").exists():
        assert time.monotonic() < deadline, "the sentiment child's tool call never started"
        time.sleep(0.05)
    execution.cancel()
    run = execution.wait(timeout=60)

    assert run.cancelled
    store = current_configuration().runtime().store
    child_id = child_run_id(run.id, "root/turn-0/tool/sentiment")
    # The other tool call's child may end first and its woken step end the run; the cancel has
    # reached this child all the same, which stops at its tool's next check.
    deadline = time.monotonic() + 30
    while store.load_run(child_id).status == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert store.load_run(child_id).status == "cancelled"


def test_preserve_context_calls_run_one_after_another_and_continue_one_conversation_on_workers(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    run = agent_tools_dist_app.RecallingCoordinatorAgent.start_execution("Remember this").wait(timeout=90)

    assert run.completed, run.error
    assert _tool_results(run) == {"first": "transfer 481", "second": "transfer 481 | still pending"}
