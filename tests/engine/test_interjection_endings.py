"""A run ends as cancelled, partial or failed even while an interjection waits for it.

The store refuses to finish a run while an interjection is pending, so that a
completion never drops a user's message. An ending is different: the run will
never read the message, so its commit marks it consumed instead of waiting
for a model turn that will not come.
"""

from __future__ import annotations

import threading

import pytest

from lg_core import Agent, InvocationError
from tests.engine.numbered_tool import NoopTool


class Gate:
    """A scripted model that waits inside its call until the test lets it answer."""

    def __init__(self, answer: dict) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.answer = answer

    def __call__(self, request) -> dict:
        self.entered.set()
        assert self.release.wait(30)
        return self.answer


def gated_agent(script, answer: dict) -> tuple[type[Agent], Gate]:
    gate = Gate(answer)
    return type("GatedAgent", (Agent,), {"model": script(gate)}), gate


def interjected_execution(agent: type[Agent], gate: Gate, **options):
    execution = agent.start_execution("Start.", **options)
    assert gate.entered.wait(30)
    execution.interject("One more thing.")
    return execution


def assert_no_pending_interjection(config, run_id: str) -> None:
    assert config.runtime().store.pending_interjections(run_id) == []


def test_cancel_ends_a_run_with_an_interjection_waiting(config, script):
    agent, gate = gated_agent(script, {"text": "Too late."})
    execution = interjected_execution(agent, gate)

    execution.cancel()
    gate.release.set()
    run = execution.wait(timeout=30)

    assert run.cancelled
    assert execution.record().status == "cancelled"
    assert [e.type for e in execution.events()][-1] == "run_cancel"
    assert_no_pending_interjection(config, run.id)


def test_a_failing_model_turn_ends_a_run_with_an_interjection_waiting(config, script):
    agent, gate = gated_agent(
        script, {"error": {"message": "the provider broke", "kind": "provider", "retryable": False}}
    )
    execution = interjected_execution(agent, gate)

    gate.release.set()
    run = execution.wait(timeout=30)

    assert run.failed
    assert execution.record().status == "failed"
    assert_no_pending_interjection(config, run.id)


def test_a_deadline_ends_a_run_with_an_interjection_waiting(config, script):
    agent, gate = gated_agent(script, {"text": "Too late."})
    execution = interjected_execution(agent, gate, deadline=1.0)

    threading.Timer(1.5, gate.release.set).start()
    run = execution.wait(timeout=30)

    assert run.outcome == "partial"
    assert execution.record().status == "partial"
    assert_no_pending_interjection(config, run.id)


def test_an_interjection_still_reaches_a_run_that_goes_on(config, script):
    """The other side of the rule: a run that continues reads the message at its next turn."""
    seen = []

    def model(request):
        seen.append([m.text for m in request.messages if m.role == "user"])
        if len(seen) == 1:
            gate.entered.set()
            assert gate.release.wait(30)
            return {"tool_calls": [{"name": "noop", "arguments": {}}]}
        return {"text": "Done."}

    gate = Gate({})
    agent = type("GoesOnAgent", (Agent,), {"model": script(model), "tools": [NoopTool]})
    execution = interjected_execution(agent, gate)
    gate.release.set()
    run = execution.wait(timeout=30)

    assert run.completed
    assert seen[-1] == ["Start.", "One more thing."]


def test_an_interjection_id_makes_a_retried_interjection_harmless(config, script):
    agent, gate = gated_agent(script, {"text": "Done."})
    execution = agent.start_execution("Start.")
    assert gate.entered.wait(30)

    first = execution.interject("One more thing.", interjection_id="req-7")
    again = execution.interject({"message": "One more thing.", "interjection_id": "req-7"})
    with pytest.raises(InvocationError, match="interjection_id must be"):
        execution.interject("Bad id.", interjection_id="has spaces")
    gate.release.set()
    execution.wait(timeout=30)

    assert first == again == 1
    assert [e.type for e in execution.events()].count("interjection") == 1
