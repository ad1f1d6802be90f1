"""A long-lived process remembers a bounded number of runs.

A run's final commit clears what an engine remembers about it, but in a fleet
that commit is made by one process only: a tools worker and the client that
started a run never make it. Here three runtimes on one SQLite file play those
roles in one process (a client starts runs with ``distributed=True``, a model
worker and a tools worker execute their steps through ``execute_claimed``, as
the Celery tasks do), with many more runs in flight than the configured
``run_cache_size``. Every run must still finish correctly (so forgetting is
safe) and no per-run memory may exceed the bound.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections import deque

import pytest

from lg_core import Agent, Configuration, with_configuration
from lg_core.engine.dispatcher import StepRef
from lg_core.providers import scripted
from tests.engine.numbered_tool import NumberedTool, numbered_calls

BOUND = 8
RUNS = 5 * BOUND
TOOL_TURNS = 2

scripted.register("bounded-memory", numbered_calls(*range(TOOL_TURNS)))


class TwoToolAgent(Agent):
    model = "scripted:bounded-memory"
    tools = [NumberedTool]


ROLES = ("client", "model", "tools")


@pytest.fixture
def fleet(tmp_path):
    """A client, a model worker and a tools worker: one Runtime each, on one store."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    configs = {role: Configuration(run_store=url, run_cache_size=BOUND) for role in ROLES}
    yield {role: config.runtime() for role, config in configs.items()}
    for config in configs.values():
        config.close()


def start_runs(client, count: int) -> list[StepRef]:
    """Start ``count`` runs as ``start_execution`` does on workers; returns their first steps."""
    refs: list[StepRef] = []
    with with_configuration(client.configuration):
        for _ in range(count):
            refs.extend(client.begin(TwoToolAgent.build_run("go"), distributed=True))
    return refs


def drive(fleet, refs: list[StepRef]) -> None:
    """Execute steps in FIFO order, as the queues deliver them: every run is in flight at once."""
    queue = deque(refs)
    while queue:
        ref = queue.popleft()
        worker = fleet["model" if ref.kind == "model" else "tools"]
        outcome, successors = worker.engine.execute_claimed(ref.run_id, ref.key)
        assert outcome == "executed", (ref, outcome)
        queue.extend(successors)


def remembered(engine) -> dict[str, int]:
    return {
        "step_inputs": len(engine.registry.step_inputs),
        "flag_polls": len(engine.registry.flag_polls),
        "interjections": len(engine.registry.interjections),
        "cancel_flags": len(engine.registry.cancel_flags),
        "runs": len(engine.registry.recent),
    }


def test_workers_and_clients_remember_at_most_run_cache_size_runs(fleet):
    refs = start_runs(fleet["client"], RUNS)
    drive(fleet, refs)

    store = fleet["client"].store
    for ref in refs:
        record = store.load_run(ref.run_id)
        assert record.status == "completed", record
        tool_steps = [step for step in store.load_steps(ref.run_id) if step.kind == "tool"]
        assert sorted(step.input["input"]["n"] for step in tool_steps) == list(range(TOOL_TURNS))
        for step in tool_steps:  # each call ran with its own input, wherever it was read from
            assert f"number {step.input['input']['n']}" in str(step.result)
    for role in ROLES:
        sizes = remembered(fleet[role].engine)
        assert all(size <= BOUND for size in sizes.values()), (role, sizes)
    # A claimed step's look-up reads its input, so no worker keeps successors' inputs.
    assert remembered(fleet["tools"].engine)["step_inputs"] == 0
    assert remembered(fleet["model"].engine)["step_inputs"] == 0


def test_a_forgotten_input_is_read_from_the_store(config, script):
    """A local run whose remembered inputs were evicted still gives each tool its own input."""
    calls = [{"name": "numbered", "arguments": {"n": n}} for n in (7, 9)]
    target = script([{"tool_calls": calls}, {"text": "ok"}])
    agent = type("LocalAgent", (Agent,), {"model": target, "tools": [NumberedTool]})
    engine = config.runtime().engine
    engine.registry.step_inputs = type(engine.registry.step_inputs)(1)  # room for one of the two calls' inputs

    run = agent.ask("go")

    assert run.outcome == "completed"
    results = [block for message in run.result.messages if message.role == "tool" for block in message.tool_results]
    assert ["number 7", "number 9"] == [block.content[0].text for block in results]


def test_runs_executed_on_threads_leave_no_thread_behind(config, script):
    """Runs started on threads here and never waited for (a batch follows them in the store)
    keep none of their threads once they end: a million-item batch must not hold a million."""
    threads = []

    def turn(request):
        threads.append(weakref.ref(threading.current_thread()))
        return {"text": "done"}

    agent = type("ThreadedAgent", (Agent,), {"model": script(turn)})
    executions = [agent.start_execution(f"run {n}") for n in range(RUNS)]
    deadline = time.monotonic() + 30
    while not all(execution.finished for execution in executions):
        assert time.monotonic() < deadline, "the runs never finished"
        time.sleep(0.01)
    gc.collect()

    assert len(threads) == RUNS
    assert [ref() for ref in threads if ref() is not None] == []
