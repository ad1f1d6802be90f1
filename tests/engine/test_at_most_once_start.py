"""An at_most_once call whose earlier attempt died is run again only if that attempt never
reached the tool (lg_core.engine._at_most_once).

The first attempt runs in a child process that dies (``os._exit``, as abrupt as SIGKILL)
at a chosen point: building the tool step's agent, in ``before_tool``, or inside the tool.
The test process then runs the step again, as a worker taking over a dead holder's claim
(``execute_claimed``) or as ``lg_core.resume`` of the killed local run. Dead before the
tool: the call runs once and the run completes normally. Dead inside it: the call reports
"outcome unknown" and is never made a second time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

import pytest
from sqlalchemy import text

import lg_core
from lg_core import Configuration, before_tool, with_configuration
from lg_core.engine._tool_call import OUTCOME_UNKNOWN
from lg_core.lease_holders import hostname
from tests.engine.at_most_once_app import DIED, TOOL_STEP, ChargeAgent, calls

ROOT = Path(__file__).resolve().parents[2]
BEFORE_THE_TOOL = ("after_initialize", "before_tool")

WORKER_CHILD = """
import sys
from lg_core import Configuration, with_configuration
config = Configuration(run_store=sys.argv[1])
with with_configuration(config):
    config.runtime().engine.execute_claimed(sys.argv[2], sys.argv[3])
"""

LOCAL_CHILD = """
import sys
import lg_core
lg_core.configure(run_store=sys.argv[1])
from tests.engine.at_most_once_app import ChargeAgent
ChargeAgent.ask("Charge the card.", run_id=sys.argv[2])
"""


@pytest.fixture
def amo_log(tmp_path, monkeypatch) -> Path:
    log = tmp_path / "calls.log"
    log.touch()
    monkeypatch.setenv("AMO_LOG", str(log))
    monkeypatch.delenv("AMO_DIE", raising=False)
    return log


@pytest.fixture
def store_url(durable_url) -> str:
    return durable_url


def _die_in_child(source: str, die_at: str, *args: str) -> None:
    env = {**os.environ, "AMO_DIE": die_at, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    child = subprocess.run([sys.executable, "-c", source, *args], env=env, timeout=120)
    assert child.returncode == DIED, f"the child's attempt did not die at {die_at} (exit status {child.returncode})"


def _drive(engine, refs) -> None:
    """Execute steps as one worker would take them from its queue, until the run has none left."""
    queue = deque(refs)
    while queue:
        outcome, successors = engine.execute_claimed(queue[0].run_id, queue.popleft().key)
        assert outcome == "executed", outcome
        queue.extend(successors)


def _dead_holder() -> str:
    """The holder string of a process on this host that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{hostname()}:{child.pid}:1"


def _assert_ran_once_and_completed(store, run_id: str, log: Path) -> None:
    record = store.load_run(run_id)
    assert (record.status, record.response) == ("completed", "Charged."), record.error
    assert calls() == [f"{run_id}/{TOOL_STEP}"], "the call must run exactly once"
    step = store.load_step(run_id, TOOL_STEP)
    assert (step.status, step.attempts) == ("succeeded", 2)
    assert step.result["tool_result"]["content"][0]["text"] == "charged 5"
    assert "tool_outcome_unknown" not in [e.type for e in store.load_events(run_id)]


def _assert_unknown_and_never_repeated(store, run_id: str, log: Path) -> None:
    record = store.load_run(run_id)
    assert record.status == "completed", record.error
    assert calls() == [f"{run_id}/{TOOL_STEP}"], "an at_most_once call that started must never run again"
    step = store.load_step(run_id, TOOL_STEP)
    assert (step.status, step.attempts) == ("unknown", 2)
    assert OUTCOME_UNKNOWN in str(step.result)
    assert [e.type for e in store.load_events(run_id)].count("tool_outcome_unknown") == 1


# -- workers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("die_at", [*BEFORE_THE_TOOL, "body"])
def test_a_worker_takes_over_a_call_whose_attempt_died(store_url, amo_log, die_at):
    config = Configuration(run_store=store_url)
    runtime = config.runtime()
    try:
        with with_configuration(config):
            (model,) = runtime.begin(ChargeAgent.build_run("Charge the card."), distributed=True)
            _outcome, (tool,) = runtime.engine.execute_claimed(model.run_id, model.key)
        _die_in_child(WORKER_CHILD, die_at, store_url, tool.run_id, tool.key)
        died = runtime.store.load_step(tool.run_id, tool.key)
        assert (died.status, died.attempts) == ("running", 1)
        assert (died.body_entered_at is not None) == (die_at == "body")

        with with_configuration(config):
            _drive(runtime.engine, [tool])  # the dead holder's claim is taken over at once

        check = _assert_unknown_and_never_repeated if die_at == "body" else _assert_ran_once_and_completed
        check(runtime.store, tool.run_id, amo_log)
    finally:
        config.close()


def test_a_claim_whose_worker_died_at_once_runs_the_call(file_config, amo_log):
    runtime = file_config.runtime()
    (model,) = runtime.begin(ChargeAgent.build_run("Charge the card."), distributed=True)
    _outcome, (tool,) = runtime.engine.execute_claimed(model.run_id, model.key)
    assert runtime.store.claim_and_load(tool.run_id, tool.key, _dead_holder(), 300).attempts == 1

    _drive(runtime.engine, [tool])

    _assert_ran_once_and_completed(runtime.store, tool.run_id, amo_log)


# -- local runs: lg_core.resume ---------------------------------------------------------------


@pytest.mark.parametrize("die_at", [*BEFORE_THE_TOOL, "body"])
def test_resume_of_a_run_killed_around_its_call(tmp_path, amo_log, die_at):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    _die_in_child(LOCAL_CHILD, die_at, url, "killed-charge")
    config = Configuration(run_store=url)
    try:
        store = config.runtime().store
        died = store.load_step("killed-charge", TOOL_STEP)
        # A local run claims its call after building the step's agent, right before before_tool.
        claimed = die_at != "after_initialize"
        assert (died.status, died.attempts) == (("running", 1) if claimed else ("scheduled", 0))
        assert (died.body_entered_at is not None) == (die_at == "body")

        with with_configuration(config):
            run = lg_core.resume("killed-charge")

        assert run.completed, run.error
        if die_at == "body":
            _assert_unknown_and_never_repeated(store, "killed-charge", amo_log)
            unknown = [m for m in run.result.messages if m.role == "tool"][0].tool_results[0]
            assert unknown.status == "error" and "outcome of this tool call is unknown" in unknown.text
        elif claimed:
            _assert_ran_once_and_completed(store, "killed-charge", amo_log)
        else:
            assert calls() == [f"killed-charge/{TOOL_STEP}"]
            assert store.load_step("killed-charge", TOOL_STEP).status == "succeeded"
    finally:
        config.close()


# -- an attempt that lost its claim before the tool -------------------------------------------


class HeldAgent(ChargeAgent):
    """Its before_tool waits until the test lets it go (``release``), once ``reached`` is set."""

    reached = threading.Event()
    release = threading.Event()

    @before_tool
    def wait_for_the_test(self, payload, **kwargs):
        HeldAgent.reached.set()
        assert HeldAgent.release.wait(60)


def test_an_attempt_that_lost_its_claim_before_the_tool_never_calls_it(file_config, amo_log):
    """Its lease ran out and another worker claimed the step while it sat in before_tool:
    it stops there, and the step's next attempt still runs the call, since nobody started it."""
    HeldAgent.reached.clear()
    HeldAgent.release.clear()
    runtime = file_config.runtime()
    (model,) = runtime.begin(HeldAgent.build_run("Charge the card."), distributed=True)
    _outcome, (tool,) = runtime.engine.execute_claimed(model.run_id, model.key)
    outcome: list[str] = []
    worker = threading.Thread(target=lambda: outcome.append(runtime.engine.execute_claimed(tool.run_id, tool.key)[0]))
    worker.start()
    assert HeldAgent.reached.wait(60)
    with runtime.store.db.engine.begin() as connection:  # the takeover, by a worker that then died
        connection.execute(
            text("update lg_steps set holder = :holder, attempts = attempts + 1 where run_id = :run_id and key = :key"),
            {"holder": _dead_holder(), "run_id": tool.run_id, "key": tool.key},
        )
    HeldAgent.release.set()
    worker.join(60)

    assert outcome == ["lost"]
    assert calls() == []
    assert runtime.store.load_step(tool.run_id, tool.key).body_entered_at is None
    _drive(runtime.engine, [tool])
    record = runtime.store.load_run(tool.run_id)
    assert record.status == "completed" and calls() == [f"{tool.run_id}/{TOOL_STEP}"]
    assert runtime.store.load_step(tool.run_id, tool.key).status == "succeeded"
