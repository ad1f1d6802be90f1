"""Subagent declarations on real workers: a model=/tools= override reaches the child's turn on another
worker (which imports the overridden class by its path), a subagent's own subagent sits below it, and an
interjection parks its call until the child's model answers it."""

import json

import pytest
import subagents_dist_app

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def test_a_childs_turn_on_a_worker_runs_with_the_declarations_model_and_tools_overrides(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    run = subagents_dist_app.DistOverridingAgent.start_execution("help me").wait(timeout=90)

    assert run.completed, run.error
    (view,) = json.loads(run.response)["subagents"]
    assert view["response"] == "override sees probe"  # the override's model, offered only the override's tool


def test_a_subagents_own_subagent_on_workers_gets_a_path_below_its_own(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = subagents_dist_app.DistNestingAgent.start_execution("help me", include_agent_events=True)
    events = list(execution.events())
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    (alpha,) = json.loads(run.response)["subagents"]
    assert alpha["subagent_id"] == "/root/alpha"
    (x,) = json.loads(alpha["response"])["subagents"]
    assert (x["subagent_id"], x["response"]) == ("/root/alpha/x", "leaf notes")
    sources = [event.data["source"] for event in events if event.type == "agent_stream"]
    assert {(source.agent_id, source.agent_path) for source in sources} == {
        ("dist_middle", "/root/alpha"),
        ("dist_leaf", "/root/alpha/x"),
    }
    assert all(source.assembly_path == () for source in sources)  # delegations are no assembly steps


def test_an_interjection_on_workers_answers_with_the_childs_next_model_response(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    run = subagents_dist_app.DistInterjectingAgent.start_execution("help me").wait(timeout=90)

    assert run.completed, run.error
    answered = json.loads(run.response)
    assert (answered["subagent_id"], answered["status"]) == ("/root/alpha", "answered")
    # Read by the turn's first model response (which asked for the note) or by the one after the note.
    assert (answered["response_disposition"], answered["response"]) in {
        ("tool_calls", ""),
        ("final", "notes on alpha? + hurry"),
    }
