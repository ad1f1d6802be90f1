"""Builder-made Graphs, Swarms and Workflows run on real Celery workers, under the definition stored with
each run: the workers import its Agents and functions by path (builder_dist_app) and never see the builder,
so an edit to the builder after the start leaves the run as it started. A builder whose definition names
a lambda is refused by ``start_execution`` itself, before a run exists, not first on a worker."""

from __future__ import annotations

import builder_dist_app
import graph_dist_app
import pytest
import swarm_dist_app

from lg_core import ConfigurationError, GraphBuilder, current_configuration
from lg_core.store import START_STEP

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
QUEUES = ("lg.orchestrate", "lg.model", "lg.tools")


def _effects(dist) -> list[int]:
    return sorted(n for tool, n, _key in dist.calls() if tool == "effect")


def test_a_built_graph_runs_on_workers_as_it_was_when_started(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)
    (dist.ready_dir / "meet-effect-2").write_text("3")  # the ledger and policy calls wait for each other
    (dist.ready_dir / "meet-effect-3").write_text("2")
    builder = builder_dist_app.transfer_graph()

    execution = builder.start_execution("Why is transfer 481 pending?")
    builder.node("audit", graph_dist_app.GraphRespondAgent).edge("respond", "audit")
    builder.finish("audit")  # later runs go on to audit; this one was started with respond as its finish
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    assert run.response == graph_dist_app.ANSWERS["respond"]
    trajectory = run.result.trajectory
    assert [step.participant for step in trajectory][0] == "triage"
    assert trajectory.concurrent(trajectory.find("ledger"), trajectory.find("policy"))
    assert _effects(dist) == [1, 2, 3, 4]
    start = current_configuration().runtime().store.load_step(run.id, START_STEP)  # the first checkpoint's
    stored = start.checkpoint["data"]["definition"]
    assert stored["assembly_id"] == "built_transfer"
    assert stored["graph"]["finish"] == "respond"
    assert stored["graph"]["edges"][1]["input"] == {"import": "builder_dist_app:findings"}


def test_a_built_swarm_hands_off_on_workers(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)

    run = builder_dist_app.charge_swarm().start_execution("Why was I charged twice?").wait(timeout=90)

    assert run.completed, run.error
    assert run.response == swarm_dist_app.ANSWER
    assert [step.participant for step in run.result.trajectory] == ["triage", "billing"]
    assert _effects(dist) == [1, 2]


def test_a_built_workflow_replays_the_perform_it_started_with_on_workers(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)
    builder = builder_dist_app.research_workflow()

    execution = builder.start_execution("Why is transfer 481 pending?")
    builder.perform(builder_dist_app.respond_only)  # later runs only
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    assert run.response == graph_dist_app.ANSWERS["respond"]
    assert [step.participant for step in run.result.trajectory] == ["triage", "ledger", "policy", "respond"]
    assert _effects(dist) == [1, 2, 3, 4]


def test_a_built_swarm_nested_in_a_built_graph_runs_as_a_child_run_on_workers(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)

    run = builder_dist_app.graph_of_a_built_swarm().start_execution("Why was I charged twice?").wait(timeout=90)

    assert run.completed, run.error
    assert run.response == swarm_dist_app.ANSWER
    assert run.result.trajectory.find("solve").assembly_kind == "swarm"


def test_a_built_graph_with_a_lambda_is_refused_by_start_execution_naming_it_and_the_fix(dist):
    builder = GraphBuilder(id="built_lambda").node("triage", graph_dist_app.GraphTriageAgent)
    builder.node("respond", graph_dist_app.GraphRespondAgent).start("triage")
    builder.edge("triage", "respond", when=lambda state: True)
    builder.finish("respond")

    with pytest.raises(ConfigurationError) as refused:
        builder.start_execution("Why is transfer 481 pending?", run_id="refused-built-graph")

    message = str(refused.value)
    assert "graph built_lambda" in message
    assert "edge triage -> respond, when" in message
    assert "write it as a module-level function" in message
    assert current_configuration().runtime().store.list_runs() == []  # refused before a run existed
