"""Swarm runs on real Celery workers: member steps on lg.orchestrate, member runs on the model and tool queues."""

from __future__ import annotations

import pytest
import swarm_dist_app

from lg_core import current_configuration

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def test_a_swarm_hands_off_on_workers_and_answers_once_with_each_side_effect_once(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = swarm_dist_app.ChargeSwarm.start_execution("Why was I charged twice?")
    events = list(execution.events())
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    assert run.response == swarm_dist_app.ANSWER
    assert [step.participant for step in run.result.trajectory] == ["triage", "billing"]
    assert run.result.journey["handoffs"] == [
        {"from": "triage", "to": "billing", "message": swarm_dist_app.HANDOFF_NOTE}
    ]
    assert sorted(n for tool, n, _key in dist.calls() if tool == "effect") == [1, 2]
    assert [event.data["target"] for event in events if event.type == "handoff"] == ["billing"]
    assert [event.data["text"] for event in events if event.type == "text_delta"] == [swarm_dist_app.ANSWER]
    store = current_configuration().runtime().store
    assert [step.kind for step in store.load_steps(run.id)].count("graph_node") == 2
    again = current_configuration().runtime().get_run(run.id)
    assert again.result.trajectory.transitions() == [("triage-1", "billing-2")]
    assert again.result.journey == run.result.journey


def test_a_swarm_nested_as_a_graph_node_runs_on_workers(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = swarm_dist_app.ChargeGraph.start_execution("Why was I charged twice?")
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    assert run.response == swarm_dist_app.ANSWER
    assert run.result.trajectory.find("solve").assembly_kind == "swarm"


def test_an_execution_of_a_swarm_in_a_graph_on_workers_streams_every_members_wrappers(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = swarm_dist_app.ChargeGraph.start_execution("Why was I charged twice?")
    wrappers = [event for event in execution.events() if event.type == "agent_stream"]

    assert execution.wait(timeout=90).completed
    paths = {tuple(step.participant for step in event.data["source"].assembly_path) for event in wrappers}
    assert paths == {("solve", "triage"), ("solve", "billing")}
    kinds = {tuple(step.assembly_kind for step in event.data["source"].assembly_path) for event in wrappers}
    assert kinds == {("graph", "swarm")}
    billing_text = [
        event.data["event"].data["text"]
        for event in wrappers
        if event.data["event"].type == "text_delta" and event.data["source"].assembly_path[-1].participant == "billing"
    ]
    assert "".join(billing_text) == swarm_dist_app.ANSWER
