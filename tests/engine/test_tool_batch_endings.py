"""A tool call of a parallel batch whose run a sibling already ended never starts.

The LocalDispatcher queues a turn's tool calls on a thread pool shared by the
runtime's runs (``max_parallel_tools``), so a call may start well after a
sibling's commit ended the run (a terminating tool-loop repeat, a failing
callback). Its tool must not run then (an ``at_most_once`` side effect of a
failed run, which nobody would ever be told of), nor may its events follow
the run's terminal event. A pool of one thread makes the order certain.
"""

from __future__ import annotations

import pytest

from lg_core import Agent, Configuration, Tool, with_configuration
from lg_core.errors import ToolLoopError
from lg_core.lease_holders import current_holder


class LookupTool(Tool):
    tool_name = "lookup"
    description = "Look up an entry."

    def call(self, input):
        return "No entry."


class ChargeTool(Tool):
    tool_name = "charge"
    description = "Charge the card."
    at_most_once = True
    charged: list[str] = []

    def call(self, input):
        ChargeTool.charged.append(self.idempotency_key)
        return "charged"


@pytest.fixture
def one_thread():
    configuration = Configuration(max_parallel_tools=1)
    with with_configuration(configuration):
        yield configuration
    configuration.close()


def _agent(target):
    return type(
        "BatchAgent",
        (Agent,),
        {"model": target, "tools": [LookupTool, ChargeTool], "detect_tool_loops": {"warning_at": 2, "terminate_at": 3}},
    )


def test_a_call_queued_behind_a_sibling_that_ended_the_run_never_starts(one_thread, script):
    ChargeTool.charged = []
    target = script(
        [
            {"tool_calls": [{"name": "lookup", "id": "l0", "arguments": {}}]},
            {"tool_calls": [{"name": "lookup", "id": "l1", "arguments": {}}]},
            # The third identical lookup stops the run before its body runs; charge waits for the thread.
            {
                "tool_calls": [
                    {"name": "lookup", "id": "l2", "arguments": {}},
                    {"name": "charge", "id": "c", "arguments": {}},
                ]
            },
            {"text": "Done."},
        ]
    )
    events: list[str] = []
    run = _agent(target).ask("Go", on_event=lambda event: events.append(event.type))

    assert run.failed and isinstance(run.error, ToolLoopError)
    assert ChargeTool.charged == [], "the at_most_once call ran for a run that had already failed"
    assert events[-1] == "run_error", f"events after the terminal one: {events[events.index('run_error') :]}"
    step = one_thread.runtime().store.load_step(run.id, "root/turn-2/tool/c")
    # Closed with the run, never started: a retry runs it.
    assert (step.status, step.attempts, step.body_entered_at) == ("failed", 0, None)


def test_an_at_most_once_claim_needs_a_running_run(file_config, script):
    """Whoever ended the run (this process or recovery elsewhere), its calls can no longer be claimed."""
    target = script([{"tool_calls": [{"name": "charge", "id": "c", "arguments": {}}]}, {"text": "Done."}])
    runtime = file_config.runtime()
    run = _agent(target).build_run("Go")
    refs = runtime.begin(run)
    (tool,) = runtime.engine.execute(refs[0])  # the model turn schedules the call
    assert runtime.engine.end_run(run.id, "failed", RuntimeError("ended by recovery"))

    assert runtime.store.claim_step(run.id, tool.key, current_holder(), 30) is None
    assert runtime.store.load_step(run.id, tool.key).attempts == 0
