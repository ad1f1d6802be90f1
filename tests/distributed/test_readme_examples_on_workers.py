"""The README's assembly examples run on real Celery workers as they run locally: node, workflow and
member steps on lg.orchestrate, child runs on the model queue. Each run is started with
``start_execution`` (``ask`` would drive it in this process), so the workers, which import the
README's classes and scripted models themselves (readme_dist_app, each example under its own model
names), execute every step. The examples share one set of workers' processes per test, as in a
deployment: the Graph example's ``triage`` model and the Swarm example's do not replace each other."""

from __future__ import annotations

import pytest
import readme_dist_app

from lg_core import current_configuration

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
QUEUES = ("lg.orchestrate", "lg.model", "lg.tools")


def test_the_support_flow_graph_routes_by_its_condition_on_workers(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)

    run = readme_dist_app.support_flow.SupportFlowGraph.start_execution("Why was I charged twice?").wait(timeout=90)

    assert run.completed, run.error
    assert run.response == "You were charged once; the other is a hold that will drop off."
    assert [step.participant for step in run.result.trajectory] == ["triage", "billing", "respond"]
    assert run.result.trajectory.transitions() == [("triage-1", "billing-2"), ("billing-2", "respond-3")]


def test_the_response_workflow_feeds_the_research_into_the_final_call_on_workers(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)

    run = readme_dist_app.response.ResponseWorkflow.start_execution("Why was I charged twice?").wait(timeout=90)

    assert run.completed, run.error
    assert run.response == "Answer based on: Transfer 481 is a pending authorization."
    assert [step.participant for step in run.result.trajectory] == ["research", "customer_support"]


def test_the_problem_solver_swarm_hands_off_from_triage_to_billing_on_workers(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)

    execution = readme_dist_app.problem_solver.ProblemSolverSwarm.start_execution("Why was I charged twice?")
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    assert run.response == "The second charge is a hold; it drops off in two days."
    assert run.result.journey["handoffs"] == [{"from": "triage", "to": "billing", "message": "Two charges on May 3."}]


def test_the_routed_workflow_takes_the_billing_branch_on_workers(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)

    run = readme_dist_app.routed.RoutedResponseWorkflow.start_execution("Was my refund issued?").wait(timeout=90)

    assert run.completed, run.error
    assert run.response == "Refund 481 was issued on May 4."
    assert [step.participant for step in run.result.trajectory] == ["triage", "billing_response"]


def test_the_investigation_workflow_runs_its_findings_at_once_on_workers(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)

    execution = readme_dist_app.investigation.InvestigationWorkflow.start_execution("Why is transfer 481 pending?")
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    assert run.response == "Transfer 481 settles within two business days."
    trajectory = run.result.trajectory
    assert trajectory.concurrent(trajectory.find("ledger_research"), trajectory.find("policy_research"))


def test_the_investigation_graph_runs_its_branches_at_once_and_its_join_once_on_workers(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)

    execution = readme_dist_app.investigation.InvestigationGraph.start_execution("Why is transfer 481 pending?")
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    assert run.response == "Transfer 481 settles within two business days."
    trajectory = run.result.trajectory
    assert trajectory.concurrent(trajectory.find("ledger"), trajectory.find("policy"))
    steps = current_configuration().runtime().store.load_steps(run.id)
    assert [step.kind for step in steps].count("graph_node") == 4  # the join ran once


def test_the_resolution_graph_runs_the_workflow_and_the_swarm_as_nested_child_runs_on_workers(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)

    execution = readme_dist_app.resolution.ResolutionGraph.start_execution("Why was I charged twice?")
    run = execution.wait(timeout=90)

    assert run.completed, run.error
    assert run.response == "The second charge is a hold; it drops off in two days."
    assert [(step.participant, step.assembly_kind) for step in run.result.trajectory] == [
        ("investigate", "workflow"),
        ("resolve", "swarm"),
    ]


def test_the_coordinator_calls_its_agent_and_graph_tools_on_workers(dist):
    dist.start_workers(queues=QUEUES, pool="threads", concurrency=8)

    coordinator = readme_dist_app.assembly_tools.SupportCoordinatorAgent
    run = coordinator.start_execution("Why is my transfer STILL pending?!", context={"account_id": "acct-7"}).wait(
        timeout=90
    )

    assert run.completed, run.error
    assert run.response == "Sorry for the wait: transfer 481 settles within two business days."
    results = [block.content[0].text for m in run.result.messages if m.role == "tool" for block in m.content]
    assert results == ["negative", "It settles within two business days."]
