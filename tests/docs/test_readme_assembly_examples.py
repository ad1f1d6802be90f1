"""The README's further assembly examples run as written: a Workflow branches in Python, a Workflow
and a Graph run branches in parallel, and a Graph nests a Workflow and a Swarm.

Some blocks build on an earlier one (the Graphs reuse the research Agents of the parallel Workflow,
the nesting Graph the Swarm of the Swarm example), so each test runs its blocks in order in one
namespace, as a reader pasting them in order would.
"""

from __future__ import annotations

import pytest

from lg_core.providers import scripted
from tests.docs.readme import marked_blocks

SCRIPTED_MODELS = (
    "route-triage", "route-billing", "route-support", "ledger", "policy", "findings", "intake", "triage", "billing",
)  # fmt: skip


def run_blocks(*markers: str) -> dict:
    namespace: dict = {"__name__": "readme_" + markers[-1].replace("-", "_")}
    for marker in markers:
        (block,) = marked_blocks(marker)
        exec(compile(block.code, "README.md", "exec"), namespace)
    return namespace


@pytest.fixture(autouse=True)
def _scripts_removed_after_the_test():
    yield
    for name in SCRIPTED_MODELS:
        scripted.unregister(name)


def test_the_routed_workflow_takes_the_branch_its_triage_answer_names(config, capsys):
    run = run_blocks("readme-routed-workflow")["run"]

    assert run.outcome == "completed", run.error
    assert run.response == "Refund 481 was issued on May 4."
    assert capsys.readouterr().out.splitlines()[-1] == "['triage', 'billing_response']"


def test_the_investigation_workflow_answers_from_both_parallel_findings(config, capsys):
    run = run_blocks("readme-investigation-workflow")["run"]

    assert run.outcome == "completed", run.error
    assert run.response == "Transfer 481 settles within two business days."
    assert capsys.readouterr().out.splitlines()[-1] == run.response
    trajectory = run.result.trajectory
    assert [step.participant for step in trajectory][-1] == "customer_support"
    assert trajectory.concurrent(trajectory.find("ledger_research"), trajectory.find("policy_research"))


def test_the_investigation_graph_runs_its_branches_at_once_and_joins_them_once(config, capsys):
    run = run_blocks("readme-investigation-workflow", "readme-investigation-graph")["run"]

    assert run.outcome == "completed", run.error
    assert run.response == "Transfer 481 settles within two business days."  # the join saw both answers
    assert capsys.readouterr().out.splitlines()[-1] == "True"
    participants = [step.participant for step in run.result.trajectory]
    assert participants[0] == "triage" and participants[-1] == "respond"
    assert sorted(participants) == ["ledger", "policy", "respond", "triage"]


def test_the_resolution_graph_runs_a_workflow_then_a_swarm_as_its_nodes(config, capsys):
    run = run_blocks("readme-swarm", "readme-investigation-workflow", "readme-resolution-graph")["run"]

    assert run.outcome == "completed", run.error
    assert run.response == "The second charge is a hold; it drops off in two days."
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == ["[('investigate', 'workflow'), ('resolve', 'swarm')]", run.response]
