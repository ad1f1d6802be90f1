"""resume takes over only a run that nobody executes: otherwise its steps would run twice."""

from __future__ import annotations

import threading

import pytest

import lg_core
from lg_core import Agent
from lg_core.errors import RunStateError


class Gate:
    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, request) -> dict:
        self.entered.set()
        assert self.release.wait(30)
        return {"text": "done"}


class WorkerAgent(Agent):
    """Module level: a resumed run imports its entrypoint again."""

    @classmethod
    def select_model(cls, invocation):
        return invocation["target"]


def test_a_run_executing_in_this_process_is_not_resumed(config, script):
    gate = Gate()
    agent = type("GatedAgent", (Agent,), {"model": script(gate)})
    execution = agent.start_execution("go")
    assert gate.entered.wait(30)

    with pytest.raises(RunStateError, match="executing in this process"):
        lg_core.resume(execution.run_id)
    gate.release.set()
    assert execution.wait(timeout=30).completed


def test_a_run_on_workers_is_resumed_here_only_when_forced(config, script):
    """Stored as start_execution stores it with a broker: its step waits for a worker."""
    calls = []
    target = script(lambda request: calls.append(1) or {"text": "done"})
    run = WorkerAgent.build_run("go", target=target)
    run._begin()
    config.runtime().begin(run, distributed=True)

    with pytest.raises(RunStateError, match="executes on workers"):
        lg_core.resume(run.id)
    assert calls == []
    assert lg_core.resume(run.id, force=True).completed
    assert calls == [1]
