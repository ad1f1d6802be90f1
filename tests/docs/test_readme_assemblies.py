"""The README's assembly examples run as written: a Graph routes, a Workflow composes, a Swarm hands off."""

from __future__ import annotations

import sys
import types

from lg_core.providers import scripted
from lg_core.store import START_STEP
from tests.docs.readme import marked_blocks


def test_the_readme_graph_example_routes_and_answers(config, capsys):
    (block,) = marked_blocks("readme-graph")
    namespace: dict = {"__name__": "readme_graph"}
    try:
        exec(compile(block.code, "README.md", "exec"), namespace)
    finally:
        for name in ("triage", "billing", "general", "respond"):
            scripted.unregister(name)

    run = namespace["run"]
    assert run.outcome == "completed", run.error
    assert run.response == "You were charged once; the other is a hold that will drop off."
    assert capsys.readouterr().out.splitlines()[-1] == "['triage', 'billing', 'respond']"
    assert run.result.trajectory.transitions() == [("triage-1", "billing-2"), ("billing-2", "respond-3")]


def test_the_readme_workflow_example_feeds_the_research_into_the_final_call(config, capsys):
    (block,) = marked_blocks("readme-workflow")
    namespace: dict = {"__name__": "readme_workflow"}
    try:
        exec(compile(block.code, "README.md", "exec"), namespace)
    finally:
        for name in ("research", "support"):
            scripted.unregister(name)

    run = namespace["run"]
    assert run.outcome == "completed", run.error
    assert run.response == "Answer based on: Transfer 481 is a pending authorization."
    assert capsys.readouterr().out.splitlines()[-1] == run.response
    assert [step.participant for step in run.result.trajectory] == ["research", "customer_support"]


def test_the_readme_swarm_example_hands_off_from_triage_to_billing(config, capsys):
    (block,) = marked_blocks("readme-swarm")
    namespace: dict = {"__name__": "readme_swarm"}
    try:
        exec(compile(block.code, "README.md", "exec"), namespace)
    finally:
        for name in ("triage", "billing"):
            scripted.unregister(name)

    run = namespace["run"]
    assert run.outcome == "completed", run.error
    assert run.response == "The second charge is a hold; it drops off in two days."
    journey = [{"from": "triage", "to": "billing", "message": "Two charges on May 3."}]
    assert run.result.journey["handoffs"] == journey
    assert capsys.readouterr().out.splitlines()[-1] == str(journey)


def test_the_readme_retry_example_retries_a_timed_out_node_and_passes_history_to_the_node_that_opts_in(config, capsys):
    (block,) = marked_blocks("readme-retries")
    namespace: dict = {"__name__": "readme_retries"}
    try:
        exec(compile(block.code, "README.md", "exec"), namespace)
    finally:
        for name in ("retry-ledger", "retry-summary"):
            scripted.unregister(name)

    run = namespace["run"]
    assert run.outcome == "completed", run.error
    assert run.response == "I sent transfer 481 on May 3. / Transfer 481 settles on May 5."
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == ["['timed_out', 'completed']", run.response]
    assert len(namespace["ledger_calls"]) == 2
    attempts = run.result.trajectory.find("ledger").attempts
    assert "AssemblyStepTimeoutError" in attempts[0].error and attempts[1].error is None


def test_the_readme_assembly_tools_example_calls_an_agent_and_a_graph_as_tools(config, capsys):
    (block,) = marked_blocks("readme-assembly-tools")
    namespace: dict = {"__name__": "readme_assembly_tools"}
    try:
        exec(compile(block.code, "README.md", "exec"), namespace)
    finally:
        for name in ("sentiment", "transfer-lookup", "transfer-explain", "coordinator"):
            scripted.unregister(name)

    run = namespace["run"]
    assert run.outcome == "completed", run.error
    assert run.response == "Sorry for the wait: transfer 481 settles within two business days."
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["['negative', 'It settles within two business days.']", run.response]


def test_the_readme_builder_example_runs_its_graph_and_stores_the_definition_it_ran(config, capsys):
    (block,) = marked_blocks("readme-builder")
    # A builder's run names its Agents by import path, as a reader's module at top level would.
    module = types.ModuleType("readme_builder")
    sys.modules[module.__name__] = module
    try:
        exec(compile(block.code, "README.md", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
        for name in ("order-triage", "order-respond"):
            scripted.unregister(name)

    run = module.run
    assert run.outcome == "completed", run.error
    assert run.response == "Your order shipped on May 2 and arrives Friday."
    assert capsys.readouterr().out.splitlines()[-1] == run.response
    assert [step.participant for step in run.result.trajectory] == ["triage", "respond"]
    start = config.runtime().store.load_step(run.id, START_STEP)  # its first checkpoint holds the definition
    assert start.checkpoint["data"]["definition"]["assembly_id"] == "order_flow"
