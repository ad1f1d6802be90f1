"""Execution.wait and wait_async in this process: a timeout, a run that already finished, and a
run that ends while they wait (they return with it, not on the next poll of the store)."""

from __future__ import annotations

import asyncio
import threading

import pytest

import lg_core
from lg_core import Agent, Tool
from lg_core.errors import DeadlineExceededError

gate = threading.Event()


class GateTool(Tool):
    """Returns once the test opens the gate."""

    tool_name = "gate"
    description = "Wait at the gate."

    def call(self, input):
        assert gate.wait(30), "the test never opened the gate"
        return "passed"


def gated_agent(script):
    turns = [{"tool_calls": [{"name": "gate", "arguments": {}}]}, {"text": "Through the gate."}]
    return type("GatedAgent", (Agent,), {"model": script(turns), "tools": [GateTool]})


@pytest.fixture(autouse=True)
def closed_gate():
    gate.clear()
    yield
    gate.set()  # a run still at the gate finishes, whatever the test did


def test_wait_times_out_while_the_run_is_at_the_gate_and_returns_the_run_once_it_ends(config, script):
    execution = gated_agent(script).start_execution("Go")

    with pytest.raises(DeadlineExceededError):
        execution.wait(timeout=0.2)
    assert execution.active  # the run keeps going
    threading.Timer(0.3, gate.set).start()
    run = execution.wait(timeout=30)

    assert run.completed and run.response == "Through the gate."


def test_wait_on_a_finished_run_returns_it_at_once(config, script):
    gate.set()
    execution = gated_agent(script).start_execution("Go")
    first = execution.wait(timeout=30)

    again = lg_core.get_execution(execution.run_id)
    assert again.wait(timeout=0.01).response == first.response == "Through the gate."
    assert asyncio.run(again.wait_async(timeout=0.01)).completed


def test_wait_async_times_out_then_returns_when_the_run_ends_on_its_thread(config, script):
    execution = gated_agent(script).start_execution("Go")
    handle = lg_core.get_execution(execution.run_id)  # a handle of its own: it waits on the live events

    async def scenario():
        with pytest.raises(DeadlineExceededError):
            await handle.wait_async(timeout=0.2)
        waiting = asyncio.create_task(handle.wait_async(timeout=30))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        gate.set()
        return await waiting

    run = asyncio.run(scenario())
    assert run.completed and run.response == "Through the gate."


def test_wait_async_reads_the_runs_live_log_instead_of_polling_the_store(config, script, monkeypatch):
    execution = gated_agent(script).start_execution("Go")
    handle = lg_core.get_execution(execution.run_id)
    store = handle.runtime.store
    loads = []
    original = store.load_run
    monkeypatch.setattr(store, "load_run", lambda run_id: loads.append(run_id) or original(run_id))

    async def scenario():
        waiting = asyncio.create_task(handle.wait_async(timeout=30))
        await asyncio.sleep(1.0)
        gate.set()
        return await waiting

    assert asyncio.run(scenario()).completed
    # Polling the store with back-off to a quarter second reads it about ten times in a second;
    # waiting on the live log reads it when it starts, after a quiet half second, and at the end.
    assert len([run_id for run_id in loads if run_id == execution.run_id]) <= 6, loads
