"""Code mode on real lg.sandbox Celery workers: exec, wait and stop are ``lg.code_exec`` steps on the
sandbox queue; a program outliving exec stays with the worker process that started it, whose own queue
its wait reaches; when that worker is SIGKILLed, wait reports the program ``terminated`` and the run
goes on. The model (tests/distributed/dist_app.py) runs the user's message as its program."""

from __future__ import annotations

import json
import signal
import time

import dist_app
import psutil
import pytest

from lg_core import Configuration, with_configuration
from lg_scheduler.scheduler import Scheduler
from tests.distributed.conftest import ALL_QUEUES
from tests.sandbox.conftest import requires_bwrap

pytestmark = [pytest.mark.slow, requires_bwrap]

OBSERVATION = {"DIST_APP_OBSERVATION_SECONDS": "1.5"}
OUTLIVES_EXEC = (
    "import time\n"
    "answers = tools.parallel(lambda: tools.lookup(n=1), lambda: tools.lookup(n=2))\n"
    "print('looked up')\n"
    "time.sleep(3)\n"
    "answers\n"
)


def start_workers(dist, sandbox_workers=2):
    dist.start_workers(queues=ALL_QUEUES, pool="threads", concurrency=4, **OBSERVATION)
    return [
        dist.start_workers(queues=("lg.sandbox",), pool="threads", concurrency=2, **OBSERVATION)[0]
        for _ in range(sandbox_workers)
    ]


def run_program(program, timeout=120):
    run = dist_app.CodeModeAgent.start_execution(program).wait(timeout=timeout)
    assert run.outcome == "completed", run.error
    return run, json.loads(run.response)


def code_exec_steps(dist, run_id):
    return [step for step in dist.config.runtime().store.load_steps(run_id) if step.kind == "code_exec"]


def test_a_program_outliving_exec_is_waited_for_on_the_worker_that_runs_it(dist):
    start_workers(dist)

    run, answer = run_program(OUTLIVES_EXEC)

    assert answer["status"] == "completed" and answer["value"] == ["answer 1", "answer 2"]
    assert answer["observations"] >= 2  # exec said still_working: at least one wait completed it
    steps = code_exec_steps(dist, run.id)
    holders = {step.result.get("program_holder") for step in steps if step.result.get("program_holder")}
    assert len(holders) == 1, "every observation of the program ran in the process that holds it"
    assert all(step.input.get("program_holder") in holders for step in steps if not step.key.endswith("/program"))
    # The program's calls ran through the tool path on that worker, keyed by the exec step and their number.
    keys = sorted(key for tool, _n, key in dist.calls() if tool == "lookup")
    assert [key.rsplit("/", 1)[1] for key in keys] == ["call-1", "call-2"]
    assert all("/tool/program/" in key for key in keys)
    stops = [event.data for event in run.events() if event.type == "tool_execution_stop"]
    assert sorted(stop["output"] for stop in stops) == ["answer 1", "answer 2"]


def test_programs_that_stop_raise_fail_a_tool_or_pass_a_limit_on_a_sandbox_worker(dist):
    start_workers(dist, sandbox_workers=1)

    _run, stopped = run_program("# waits: 1\nimport time\ntime.sleep(600)\n")
    assert (stopped["status"], stopped["observations"]) == ("terminated", 3)  # exec, one wait, stop

    _run, raised = run_program("x = 1\nraise ValueError('boom')\n")
    assert raised["status"] == "error" and "ValueError: boom" in raised["error"]

    _run, handled = run_program(
        "try:\n    tools.lookup(n=-1)\nexcept ToolCallError as error:\n    finish('handled: ' + str(error))\n"
    )
    assert handled["value"] == "handled: no topic -1"

    _run, limited = run_program("for n in range(4):\n    tools.lookup(n=n)\n")
    assert limited["status"] == "error"
    assert "the program reached its limit of 3 tool calls" in limited["error"]


def test_sigkill_of_the_sandbox_worker_during_a_program_makes_wait_report_terminated(dist):
    (sandbox,) = start_workers(dist, sandbox_workers=1)
    config = Configuration(
        run_store=dist.pg_url, broker_url=dist.redis.url, imports=["dist_app"], lease_seconds=3, relay_grace=0.5
    )
    with with_configuration(config):
        execution = dist_app.CodeModeAgent.start_execution("import time\ntools.lookup(n=1)\ntime.sleep(600)\n")
        deadline = time.monotonic() + 60
        while not any(
            step.result and "program_holder" in step.result for step in code_exec_steps(dist, execution.run_id)
        ):
            assert time.monotonic() < deadline, "exec never reported the program still working"
            time.sleep(0.1)
        sandbox.kill(signal.SIGKILL)
        dist.start_workers(queues=("lg.sandbox",), pool="threads", concurrency=2, **OBSERVATION)
        scheduler = Scheduler(config.runtime())
        deadline = time.monotonic() + 120
        while not execution.finished and time.monotonic() < deadline:
            scheduler.run_once()
            time.sleep(0.2)
        run = execution.wait(timeout=5)

    assert run.outcome == "completed", run.error
    assert json.loads(run.response)["status"] == "terminated"
    assert [n for tool, n, _key in dist.calls() if tool == "lookup"] == [1], "the program was not run again"


def test_a_sandbox_worker_dead_on_another_host_is_seen_by_its_holder_lease_and_wait_reports_terminated(dist):
    """The scheduler judges the holder as if it ran on another host (no process-id check): the worker's
    holder lease, renewed while it held the program, runs out after the SIGKILL, and the wait left in its
    queue is re-sent to lg.sandbox about a lease period later."""
    (sandbox,) = start_workers(dist, sandbox_workers=1)
    config = Configuration(
        run_store=dist.pg_url, broker_url=dist.redis.url, imports=["dist_app"], lease_seconds=3, relay_grace=0.5
    )
    with with_configuration(config):
        store = config.runtime().store
        execution = dist_app.CodeModeAgent.start_execution("import time\ntools.lookup(n=1)\ntime.sleep(600)\n")
        deadline = time.monotonic() + 60
        while not (holders := program_holders(dist, execution.run_id)):
            assert time.monotonic() < deadline, "exec never reported the program still working"
            time.sleep(0.1)
        assert set(store.holder_leases(holders)) == holders, "the holding worker keeps a holder lease"
        time.sleep(2 * dist.lease_seconds)
        assert min(store.holder_leases(holders).values()) > store.clock(), "renewed while the program runs"
        sandbox.kill(signal.SIGKILL)
        killed = time.monotonic()
        dist.start_workers(queues=("lg.sandbox",), pool="threads", concurrency=2, **OBSERVATION)
        scheduler = Scheduler(config.runtime(), local_liveness=False)
        deadline = time.monotonic() + 120
        while not execution.finished and time.monotonic() < deadline:
            scheduler.run_once()
            time.sleep(0.2)
        run = execution.wait(timeout=5)

    assert run.outcome == "completed", run.error
    assert json.loads(run.response)["status"] == "terminated"
    assert time.monotonic() - killed < 60, "the wait waited for a back-off, not for the holder's lease"
    assert [n for tool, n, _key in dist.calls() if tool == "lookup"] == [1], "the program was not run again"


def program_holders(dist, run_id):
    return {
        step.result["program_holder"]
        for step in code_exec_steps(dist, run_id)
        if step.result and "program_holder" in step.result
    }


def test_a_program_left_running_when_the_run_ends_is_stopped_by_its_worker(dist):
    (sandbox,) = start_workers(dist, sandbox_workers=1)

    _run, answer = run_program("# leave running\nimport time\ntools.lookup(n=1)\ntime.sleep(600)\n")

    assert answer["status"] == "still_working"
    deadline = time.monotonic() + 30
    while programs_of(sandbox.pid):
        assert time.monotonic() < deadline, "the worker kept the program of an ended run"
        time.sleep(0.2)


def programs_of(pid):
    """The bwrap processes of code-mode programs under worker ``pid`` (their arguments name the program's
    temporary workspace)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "lg-code-" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found
