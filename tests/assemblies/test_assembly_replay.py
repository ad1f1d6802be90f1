"""Retry and fork of assembly runs: a retried Graph, Swarm or Workflow run keeps every committed step
(their child runs are reused, nothing runs twice) and re-runs its failed step with a fresh child run;
a fork of an assembly run is refused with what to do instead."""

from __future__ import annotations

import pytest

import lg_core
from lg_core.assemblies.child_runs import child_run_id
from lg_core.errors import InvocationError, RunStateError
from tests.assemblies.replayable_assemblies import (
    FLAKY,
    BranchGraph,
    ChainGraph,
    DeskSwarm,
    TwoCallWorkflow,
    calls,
    reset,
)


def node_children(config, run_id: str) -> dict[str, str]:
    """Each node execution's child run id, as the run's frame records it."""
    frame = config.runtime().store.load_frame(f"{run_id}/root")
    return {record["node"]: record["child_run_id"] for record in frame.checkpoint["data"]["done"]}


def test_a_retried_graph_run_reruns_only_its_failed_node_with_a_fresh_child(config):
    reset(second=1)
    failed = ChainGraph.ask("Go")
    assert failed.failed
    store = config.runtime().store
    [failed_step] = [s for s in store.load_steps(failed.id) if s.status == "failed"]

    run = lg_core.retry(failed.id)

    assert run.id == failed.id
    assert run.completed, run.error
    assert run.response == "third done"
    assert calls() == (1, 2, 1), "the committed node did not run again"
    assert [step.participant for step in run.result.trajectory] == ["first", "second", "third"]
    types = [e.type for e in run.events()]
    assert types.count("run_retried") == 1 and types[-1] == "run_stop"
    retried = next(e for e in run.events() if e.type == "run_retried")
    assert retried.data["step"] == failed_step.key == "root/node-2/second"
    assert retried.data["restored_from"] == "root/node-1/first"
    children = node_children(config, run.id)
    assert children["first"] == child_run_id(run.id, "root/node-1/first"), "the first node's child is kept"
    assert children["second"] == child_run_id(run.id, "root/node-2/second", 1), "the retry's child is fresh"
    assert store.load_run(child_run_id(run.id, "root/node-2/second")).status == "failed"
    assert store.load_run(children["second"]).status == "completed"


def test_a_branch_whose_child_completed_after_the_run_failed_keeps_that_child_on_retry(config):
    reset(branch=True, second=1)
    failed = BranchGraph.ask("Go")
    assert failed.failed
    store = config.runtime().store
    slow_child = store.load_run(child_run_id(failed.id, "root/node-3/slow"))
    assert slow_child.status == "completed", "the slow branch's child finished after its run failed"

    run = lg_core.retry(failed.id)

    assert run.completed, run.error
    assert FLAKY["slow"].calls == 1, "the completed child was kept, not run again"
    assert FLAKY["second"].calls == 2 and calls() == (1, 2, 1)
    assert node_children(config, run.id)["slow"] == slow_child.id


def test_a_graph_run_that_fails_again_can_be_retried_again(config):
    reset(second=2)
    failed = ChainGraph.ask("Go")
    assert lg_core.retry(failed.id).failed
    run = lg_core.retry(failed.id)

    assert run.completed, run.error
    assert calls() == (1, 3, 1)


def test_a_graph_run_whose_start_node_failed_is_retried_from_its_start(config):
    reset(first=1)
    failed = ChainGraph.ask("Go")
    run = lg_core.retry(failed.id)

    assert run.completed, run.error
    assert calls() == (2, 1, 1)


def test_a_retried_graph_run_in_a_session_records_its_turn_once(config):
    reset(second=1)
    failed = ChainGraph.ask("Go", session_id="conv-1", actor_id="user-1")
    assert config.runtime().session_store.load("conv-1", actor_id="user-1") is None, "a failed run adds nothing"
    run = lg_core.retry(failed.id)

    assert run.completed, run.error
    snapshot = config.runtime().session_store.load("conv-1", actor_id="user-1")
    assert [(m.role, m.text) for m in snapshot.messages] == [("user", "Go"), ("assistant", "third done")]


def test_a_retried_workflow_run_keeps_its_completed_calls(config):
    reset(second=1)
    failed = TwoCallWorkflow.ask("Go")
    assert failed.failed
    run = lg_core.retry(failed.id)

    assert run.completed, run.error
    assert run.response == "second done"
    assert calls()[:2] == (1, 2)


def test_a_retried_swarm_run_reruns_its_failed_member(config):
    reset(desk=1)
    failed = DeskSwarm.ask("Help")
    assert failed.failed
    run = lg_core.retry(failed.id)

    assert run.completed, run.error
    assert run.response == "desk done"


def test_a_completed_graph_run_cannot_be_retried(config):
    reset()
    run = ChainGraph.ask("Go")
    assert run.completed
    with pytest.raises(RunStateError, match="completed, so there is nothing to retry"):
        lg_core.retry(run.id)


def test_a_fork_of_a_graph_run_is_refused_saying_what_to_do(config):
    reset(second=1)
    failed = ChainGraph.ask("Go")

    with pytest.raises(InvocationError, match="graph run, which cannot be forked") as caught:
        lg_core.fork(failed.id, from_step="root/node-2/second")
    assert f"lg runs retry {failed.id}" in str(caught.value)
    assert config.runtime().store.load_run(failed.id).status == "failed", "the original is untouched"


def test_retrying_a_graph_run_in_another_actors_session_is_refused_by_the_session(config):
    reset()
    ChainGraph.ask("Mine.", session_id="conv-1", actor_id="acme")
    reset(second=1)
    other = ChainGraph.ask("Theirs.", session_id="conv-1", actor_id="globex")
    assert other.failed and type(other.error).__name__ == "SessionActorError"
    again = lg_core.retry(other.id)

    assert again.failed and type(again.error).__name__ == "SessionActorError"
    assert calls() == (0, 0, 0), "the other actor's run never reached a node"


@pytest.fixture
def cli(monkeypatch):
    """``lg`` with the replay commands, reading no configuration from the environment."""
    from typer.testing import CliRunner

    from lg_core.cli import app, runs_app
    from lg_core.replay_cli import register

    for name in ("LG_RUN_STORE", "LG_IMPORTS", "LG_BROKER_URL", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    if not any(command.name == "retry" for command in runs_app.registered_commands):
        register(app, runs_app)
    return lambda *args: CliRunner().invoke(app, list(args))


def failed_graph_run(store: str) -> str:
    from lg_core import Configuration, with_configuration

    configuration = Configuration(run_store=store)
    with with_configuration(configuration):
        run = ChainGraph.ask("Go", run_id="cli-graph")
    configuration.close()
    assert run.failed
    return run.id


def test_lg_runs_retry_completes_a_failed_graph_run(cli, tmp_path):
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    reset(second=1)
    run_id = failed_graph_run(store)

    result = cli("runs", "retry", run_id, "--store", store)

    assert result.exit_code == 0, result.output
    assert "retrying step root/node-2/second from the checkpoint of root/node-1/first" in result.stderr
    assert f"completed run {run_id}" in result.stderr
    assert calls() == (1, 2, 1)


def test_lg_runs_fork_of_a_graph_run_is_a_usage_error_saying_what_to_do(cli, tmp_path):
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    reset(second=1)
    run_id = failed_graph_run(store)

    result = cli("runs", "fork", run_id, "--from-step", "root/node-2/second", "--store", store)

    assert result.exit_code == 2, result.output
    assert "graph run, which cannot be forked" in result.stderr and f"lg runs retry {run_id}" in result.stderr
