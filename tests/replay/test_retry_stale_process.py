"""A retry while the process that ran the run locally still executes one of its tool calls.

The run was cancelled by one call of a parallel turn while the other call
("slow") still ran in the original process. An operator retries the run from
another process before "slow" returns. The retry runs "slow" again itself; the
original process's late result belongs to the attempt the retry replaced and
must not move the retried run (it holds a Run whose token is cancelled).
"""

from __future__ import annotations

import threading
import time

from lg_core import Configuration, Tool, replay
from lg_core.runtime import current_runtime
from tests.replay.replay_app import ReplayAgent

FIRST_RELEASE = threading.Event()
SECOND_RELEASE = threading.Event()
SLOW_CALLS: list[int] = []


class SlowTool(Tool):
    tool_name = "slow"
    description = "A long call that never checks for cancellation."
    input_schema = {"type": "object", "properties": {}}

    def call(self, input):
        SLOW_CALLS.append(1)
        (FIRST_RELEASE if len(SLOW_CALLS) == 1 else SECOND_RELEASE).wait(30)
        return "slow done"


class StopperTool(Tool):
    """Once "slow" has started, an operator cancels the run inside this call (the first time only)."""

    tool_name = "stopper"
    description = "Stop the run."
    input_schema = {"type": "object", "properties": {}}
    stopped = False

    def call(self, input):
        if not StopperTool.stopped:
            StopperTool.stopped = True
            _wait_for(lambda: SLOW_CALLS)
            self.run.cancel("an operator stopped the run")
            self.run.cancellation_token.raise_if_cancelled()
        return "stopped"


class SlowAgent(ReplayAgent):
    tools = [*ReplayAgent.tools, SlowTool, StopperTool]


def _wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_late_result_of_the_replaced_attempt_does_not_cancel_the_retried_run(file_config, script):
    FIRST_RELEASE.clear()
    SECOND_RELEASE.clear()
    SLOW_CALLS.clear()
    StopperTool.stopped = False
    calls = [{"name": "stopper", "id": "a", "arguments": {}}, {"name": "slow", "id": "b", "arguments": {}}]
    target = script([{"tool_calls": calls}, {"text": "Both recorded."}])
    store = current_runtime().store

    execution = SlowAgent.start_execution("Record two steps.", target=target)  # this process executes it
    _wait_for(lambda: store.load_run(execution.run_id).status == "cancelled" and len(SLOW_CALLS) == 1)

    operator = Configuration(run_store=file_config.run_store)  # another process on the same store
    retried: list = []
    retrier = threading.Thread(
        target=lambda: retried.append(replay.retry(execution.run_id, runtime=operator.runtime()))
    )
    try:
        retrier.start()
        _wait_for(lambda: len(SLOW_CALLS) == 2)  # the retry ran "a" and now runs "b" itself
        FIRST_RELEASE.set()  # the original process's "b" returns after the retry reopened the run
        time.sleep(0.5)
        SECOND_RELEASE.set()
        retrier.join(30)
        execution.wait(timeout=30)
    finally:
        FIRST_RELEASE.set()
        SECOND_RELEASE.set()
        retrier.join(30)
        operator.close()

    [run] = retried
    record = store.load_run(execution.run_id)
    assert (record.status, record.response) == ("completed", "Both recorded."), record.error
    assert run.outcome == "completed", run.error
