"""A run ended from outside its steps leaves no step open.

Recovery ends a distributed run that a cancel request or a passed deadline
should stop when no live step will (``lg_scheduler.recovery.end_runs``), and a
step out of attempts ends its run (``StepExecutor._give_up``). The steps the run
still had open close in the same commit (``cancelled`` for a cancelled run,
``failed`` otherwise, as the ending step of such a run is), so ``lg runs show``
lists none and the relay, the sweeper and the stall detector find nothing to
send; ``lg runs retry`` runs them again. A step still running on a live worker
then can neither start an at_most_once tool nor commit, and its worker goes on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from typer.testing import CliRunner

import lg_core
from lg_core import Agent, Tool, before_tool
from lg_core.cli import app
from lg_core.errors import CancelledError
from lg_core.lease_holders import hostname
from lg_scheduler.recovery import end_runs, relay_outbox, sweep_leases
from tests.engine.numbered_tool import RecordingPublisher

CALLED: list[str] = []
TOOLS = ("root/turn-0/tool/a", "root/turn-0/tool/b")


class LogTool(Tool):
    tool_name = "log"
    description = "Log a line."
    input_schema = {"type": "object", "properties": {"line": {"type": "string"}}, "required": ["line"]}

    def call(self, input):
        CALLED.append(input["line"])
        return "logged"


class ChargeTool(Tool):
    tool_name = "charge"
    description = "Charge the card; never twice."
    at_most_once = True

    def call(self, input):
        CALLED.append("charge")
        return "charged"


class Gate:
    """Holds a before_tool callback until the test lets it go."""

    reached = threading.Event()
    release = threading.Event()


class TwoCallAgent(Agent):
    tools = [LogTool, ChargeTool]

    @classmethod
    def select_model(cls, invocation):
        return invocation["target"]

    @before_tool
    def hold(self, payload, **kwargs):
        if payload["tool_use"].name == "charge":
            Gate.reached.set()
            assert Gate.release.wait(60)


@pytest.fixture(autouse=True)
def _fresh():
    CALLED.clear()
    Gate.reached.clear()
    Gate.release.clear()


def _two_calls(script, second: str = "log", first: str = "log") -> str:
    calls = [
        {"name": first, "id": "a", "arguments": {"line": "a"}},
        {"name": second, "id": "b", "arguments": {"line": "b"}},
    ]
    return script([{"tool_calls": calls}, {"text": "Both done."}])


def _dead_holder() -> str:
    """The holder string of a process on this host that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{hostname()}:{child.pid}:1"


def _start_with_a_dead_worker(runtime, target, **invocation):
    """A distributed run whose model turn scheduled two calls: one claimed by a worker that died, one waiting."""
    (model,) = runtime.begin(TwoCallAgent.build_run("Do both.", target=target, **invocation), distributed=True)
    _outcome, tools = runtime.engine.execute_claimed(model.run_id, model.key)
    assert [ref.key for ref in tools] == list(TOOLS)
    assert runtime.store.claim_step(model.run_id, TOOLS[0], _dead_holder(), lease_seconds=300) == 1
    return model.run_id


def test_a_run_recovery_cancels_closes_its_open_steps_and_a_retry_runs_them(file_config, script):
    runtime = file_config.runtime()
    run_id = _start_with_a_dead_worker(runtime, _two_calls(script))
    assert runtime.store.request_cancel(run_id)

    assert end_runs(runtime.engine, runtime.store) == (1, 0)

    assert runtime.store.load_run(run_id).status == "cancelled"
    assert runtime.store.load_steps(run_id, open_only=True) == []
    steps = {step.key: step for step in runtime.store.load_steps(run_id)}
    assert [(steps[key].status, steps[key].attempts, steps[key].holder) for key in TOOLS] == [
        ("cancelled", 1, None),
        ("cancelled", 0, None),
    ]
    shown = json.loads(CliRunner().invoke(app, ["runs", "show", run_id, "--store", runtime.store.url, "--json"]).stdout)
    assert {step["key"]: step["status"] for step in shown["steps"]}[TOOLS[0]] == "cancelled"
    assert not any(step["status"] in ("scheduled", "running") for step in shown["steps"])
    publisher = RecordingPublisher()
    assert (relay_outbox(runtime.store, publisher), sweep_leases(runtime.store, publisher, hold_off=0)) == (0, 0)

    run = lg_core.retry(run_id, runtime=runtime)

    assert run.completed, run.error
    assert sorted(CALLED) == ["a", "b"]
    retried = next(event for event in run.events() if event.type == "run_retried")
    assert retried.data["rescheduled"] == list(TOOLS)


def test_a_run_past_its_deadline_closes_its_steps_failed_and_a_retry_names_one_to_fork_from(file_config, script):
    runtime = file_config.runtime()
    run_id = _start_with_a_dead_worker(runtime, _two_calls(script), deadline=600)
    with runtime.store.db.engine.begin() as connection:  # the deadline passes
        connection.exec_driver_sql("update lg_runs set deadline_at = 1 where id = ?", (run_id,))

    assert end_runs(runtime.engine, runtime.store) == (0, 1)

    assert runtime.store.load_run(run_id).status == "partial"
    assert [runtime.store.load_step(run_id, key).status for key in TOOLS] == ["failed", "failed"]
    with pytest.raises(lg_core.RunStateError, match=f"--from-step {TOOLS[0]} --deadline"):
        lg_core.retry(run_id, runtime=runtime)


def test_a_live_worker_whose_run_was_ended_stops_before_its_at_most_once_tool(file_config, script):
    """Recovery judged its lease dead (a long pause) and ended the run; the worker then wakes up."""
    runtime = file_config.runtime()
    (model,) = runtime.begin(TwoCallAgent.build_run("Do both.", target=_two_calls(script, "charge")), distributed=True)
    _outcome, (log, charge) = runtime.engine.execute_claimed(model.run_id, model.key)
    outcome: list[str] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            outcome.append(runtime.engine.execute_claimed(charge.run_id, charge.key)[0])
        except BaseException as exc:  # noqa: BLE001 - the test asserts there is none
            errors.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    assert Gate.reached.wait(60)
    assert runtime.engine.end_run(model.run_id, "cancelled", CancelledError("stopped by recovery"))
    events = len(runtime.store.load_events(model.run_id))
    Gate.release.set()
    worker.join(60)

    assert errors == [] and outcome == ["lost"]
    assert CALLED == [], "the at_most_once tool of an ended run was called"
    step = runtime.store.load_step(model.run_id, charge.key)
    assert (step.status, step.holder, step.body_entered_at) == ("cancelled", None, None)
    assert len(runtime.store.load_events(model.run_id)) == events, "events after the run's terminal one"
    assert runtime.engine.execute_claimed(log.run_id, log.key) == ("done", [])


class SlowLogTool(LogTool):
    """Holds its call until the test lets it go."""

    tool_name = "slow_log"

    def call(self, input):
        Gate.reached.set()
        assert Gate.release.wait(60)
        return super().call(input)


class SlowAgent(TwoCallAgent):
    tools = [SlowLogTool]


def test_a_live_worker_whose_run_was_ended_cannot_commit_its_call(file_config, script):
    runtime = file_config.runtime()
    (model,) = runtime.begin(
        SlowAgent.build_run("Do both.", target=_two_calls(script, first="slow_log")), distributed=True
    )
    _outcome, (first, _second) = runtime.engine.execute_claimed(model.run_id, model.key)
    result: list[tuple[str, list]] = []
    worker = threading.Thread(target=lambda: result.append(runtime.engine.execute_claimed(first.run_id, first.key)))
    worker.start()
    assert Gate.reached.wait(60)
    assert runtime.engine.end_run(model.run_id, "failed", RuntimeError("out of attempts elsewhere"))
    Gate.release.set()
    worker.join(60)

    assert len(result) == 1 and result[0][0] in ("executed", "lost") and result[0][1] == []
    step = runtime.store.load_step(model.run_id, first.key)
    assert (step.status, step.result, step.event_seq) == ("failed", None, None)
    assert runtime.store.load_run(model.run_id).status == "failed"
