"""Managed subagents on real workers: each child turn is a step running a child run, and a parent's
wait parks its step, holding no worker thread, until a child turn's commit wakes it."""

import json
import time

import pytest
import subagents_dist_app

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def test_a_parent_delegates_to_two_children_on_workers_and_answers_from_both(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    execution = subagents_dist_app.DistSupportAgent.start_execution("help me", include_agent_events=True)
    events = list(execution.events())
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    # The children's turns run on other workers: theirs publish the wrappers to the parent's stream.
    sources = [event.data["source"] for event in events if event.type == "agent_stream"]
    assert {source.agent_path for source in sources} == {"/root/alpha", "/root/beta"}
    assert all(source.assembly_path == () for source in sources)
    assert run.response == subagents_dist_app.FINAL
    topics = sorted(topic for tool, topic, _key in dist.calls() if tool == "effect")
    assert topics == [1, 2, 3]  # each committed child turn's side effect once: alpha, beta, the follow-up


def test_parents_waiting_on_slow_children_complete_on_an_orchestrate_worker_with_fewer_threads(dist):
    dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=1)
    dist.start_workers(queues=("lg.model", "lg.tools"), pool="threads", concurrency=16, DIST_APP_CHILD_DELAY="1.0")

    executions = [subagents_dist_app.DistSupportAgent.start_execution(f"help {i}") for i in range(3)]
    runs = [execution.wait(timeout=120) for execution in executions]

    assert all(run.completed for run in runs), [run.error for run in runs]
    assert {run.response for run in runs} == {subagents_dist_app.FINAL}


def test_a_parked_wait_is_woken_by_the_scheduler_when_its_long_poll_passes(dist):
    from lg_scheduler.scheduler import Scheduler

    dist.start_workers(
        queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8, DIST_APP_CHILD_DELAY="3.0"
    )
    scheduler = Scheduler(dist.config.runtime())
    execution = subagents_dist_app.DistImpatientAgent.start_execution("help me")
    store = dist.config.runtime().store
    deadline = time.monotonic() + 60
    woken = 0
    while store.load_run(execution.run_id).status == "running":
        assert time.monotonic() < deadline, "the run did not end"
        woken += scheduler.run_once()["woken"]
        time.sleep(0.2)

    run = execution.wait(timeout=10)
    assert run.completed, run.error
    statuses = run.response.split()
    assert statuses[-1] == "ready"
    assert "still_working" in statuses  # a wait whose long poll passed answered, woken by its timer
    assert woken >= 1


def test_a_sync_spawn_on_workers_answers_with_the_childs_first_answer(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)

    run = subagents_dist_app.DistSyncAgent.start_execution("help me").wait(timeout=90)

    assert run.completed, run.error
    answer = json.loads(run.response)
    assert answer["status"] == "ready"
    assert answer["subagents"][0]["response"] == "notes on alpha?"


def test_a_child_kept_in_the_session_is_listed_and_followed_up_by_a_later_run_on_workers(dist):
    from lg_core.subagents.persistence import registry_session_id

    dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=8)
    agent = subagents_dist_app.DistKeepingAgent

    first = agent.start_execution("spawn", session_id="conv-kept", actor_id="acme").wait(timeout=90)
    assert first.completed, first.error
    assert json.loads(json.loads(first.response)[0])["subagents"][0]["response"] == "notes on alpha?"
    registry = dist.config.runtime().session_store.load(registry_session_id("conv-kept", "acme"), actor_id="acme")
    assert [entry["subagent_id"] for entry in registry.state["subagents"]] == ["/root/alpha"]

    second = agent.start_execution("follow", session_id="conv-kept", actor_id="acme").wait(timeout=90)
    assert second.completed, second.error
    listed, followed = (json.loads(text) for text in json.loads(second.response))
    assert [(view["subagent_id"], view["status"]) for view in listed["subagents"]] == [("/root/alpha", "completed")]
    assert followed["subagents"][0]["response"] == "notes on alpha? + more?"
    topics = sorted(topic for tool, topic, _key in dist.calls() if tool == "effect")
    assert topics == [1, 3]  # alpha's first turn and its follow-up, each once
