"""A Graph, a Workflow and a Swarm whose participants' models fail their first calls on demand.

Module level, so that ``lg_core.retry`` rebuilds each run and its child runs from their
import paths. ``FLAKY[name]`` counts the calls of the model ``name`` and says how many of
the first fail (``reset`` sets them).
"""

from __future__ import annotations

import time
from typing import Any

from lg_core import Agent, Graph, Swarm, Workflow, edge
from lg_core.providers import scripted


class Flaky:
    """A scripted model's answers: its first ``failures`` calls fail, every call is counted."""

    def __init__(self, name: str) -> None:
        self.name, self.failures, self.calls = name, 0, 0
        self.expected = False  # (slow) a parallel branch of the run asks this model

    def __call__(self, request: Any) -> dict[str, str]:
        self.calls += 1
        if self.calls <= self.failures:
            if self.name == "second":  # fail only once the parallel slow branch is running
                _wait_for(lambda: FLAKY["slow"].calls > 0 or not FLAKY["slow"].expected)
            return {"error": f"{self.name} is down"}
        if self.name == "slow":
            time.sleep(0.5)  # the other branch fails meanwhile; this answer comes after the run ended
        return {"text": f"{self.name} done"}


FLAKY = {name: Flaky(name) for name in ("first", "second", "third", "desk", "slow")}
for _name, _model in FLAKY.items():
    scripted.register(f"replayable-{_name}", _model)


def reset(*, branch: bool = False, **failures: int) -> None:
    """Every call count back to zero; ``failures`` says how many first calls of each model fail.
    With ``branch`` (BranchGraph) the second node fails only once the slow branch runs."""
    for name, model in FLAKY.items():
        model.calls, model.failures = 0, failures.get(name, 0)
    FLAKY["slow"].expected = branch


def _wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def calls() -> tuple[int, ...]:
    return tuple(FLAKY[name].calls for name in ("first", "second", "third"))


class FirstAgent(Agent):
    model = "scripted:replayable-first"


class SecondAgent(Agent):
    model = "scripted:replayable-second"


class ThirdAgent(Agent):
    model = "scripted:replayable-third"


class DeskAgent(Agent):
    model = "scripted:replayable-desk"


class SlowAgent(Agent):
    model = "scripted:replayable-slow"


class BranchGraph(Graph):
    """first, then second (which fails) and slow (which answers late) in parallel, joined at third."""

    nodes = {"first": FirstAgent, "second": SecondAgent, "slow": SlowAgent, "third": ThirdAgent}
    start = "first"
    edges = [edge("first", "second"), edge("first", "slow"), edge("second", "third"), edge("slow", "third")]
    finish = "third"


class ChainGraph(Graph):
    nodes = {"first": FirstAgent, "second": SecondAgent, "third": ThirdAgent}
    start = "first"
    edges = [edge("first", "second"), edge("second", "third")]
    finish = "third"


class TwoCallWorkflow(Workflow):
    def perform(self) -> Any:
        draft = self.invoke(FirstAgent)
        return self.invoke(SecondAgent, input=draft.output)


class DeskSwarm(Swarm):
    members = [DeskAgent]
    start = DeskAgent
