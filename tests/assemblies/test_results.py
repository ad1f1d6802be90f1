"""The result value types: Step (bounded output), Attempt, Trajectory queries, Graph.State copies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest

from lg_core import Assembly, Graph, Usage
from lg_core.assemblies.trajectory import MAX_STEP_OUTPUT_CHARS, describe_error
from lg_core.messages import Message
from lg_core.run_result import RunResult

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def attempt(start, end, status="completed", number=1, tokens=0):
    return Assembly.Attempt(
        number=number,
        started_at=T0 + timedelta(seconds=start),
        finished_at=T0 + timedelta(seconds=end),
        status=status,
        usage=Usage(output_tokens=tokens),
    )


def step(id, participant, attempts, predecessors=(), output="ok", **extra):
    return Assembly.Step(
        id=id,
        participant=participant,
        assembly_id=participant,
        assembly_kind="agent",
        status="completed",
        attempts=attempts,
        output=output,
        predecessor_ids=predecessors,
        **extra,
    )


@pytest.fixture
def investigation():
    """triage, then ledger and policy at once (overlapping), then respond."""
    return Assembly.Trajectory(
        [
            step("s1", "triage", [attempt(0, 1)]),
            step("s2", "ledger", [attempt(1, 3, tokens=5)], ("s1",), branch_id="b1"),
            step("s3", "policy", [attempt(1.5, 2.5)], ("s1",), branch_id="b2"),
            step("s4", "respond", [attempt(3, 4)], ("s2", "s3")),
        ]
    )


def test_a_trajectory_iterates_in_execution_order_and_lists_its_transitions(investigation):
    assert [item.participant for item in investigation] == ["triage", "ledger", "policy", "respond"]
    assert investigation.transitions() == [("s1", "s2"), ("s1", "s3"), ("s2", "s4"), ("s3", "s4")]
    assert len(investigation) == 4


def test_concurrent_says_whether_attempts_overlapped_by_id_or_step(investigation):
    ledger, policy = investigation.find("ledger"), investigation.find("policy")
    assert investigation.concurrent(ledger.id, policy.id)
    assert investigation.concurrent(ledger, policy)
    assert not investigation.concurrent("s1", "s2")  # one ends as the other starts
    assert not investigation.concurrent("s2", "s4")


def test_steps_are_found_by_participant_and_by_id(investigation):
    assert investigation.find("respond").id == "s4"
    assert investigation.find("nobody") is None
    assert investigation.for_participant("ledger") == (investigation.step("s2"),)
    with pytest.raises(KeyError, match="no step 'missing'"):
        investigation.step("missing")


def test_children_and_attempts_are_looked_up_by_step_id():
    trajectory = Assembly.Trajectory(
        [
            step("outer", "investigate", [attempt(0, 5)]),
            step("inner", "ledger", [attempt(1, 2), attempt(2, 3, number=2)], parent_id="outer"),
        ]
    )
    assert trajectory.children("outer") == (trajectory.step("inner"),)
    assert [item.number for item in trajectory.attempts_for("inner")] == [1, 2]


def test_a_step_adds_up_the_usage_of_its_attempts():
    retried = step("s", "ledger", [attempt(0, 1, "failed", tokens=3), attempt(1, 2, number=2, tokens=4)])
    assert retried.usage.output_tokens == 7


def test_a_long_output_is_cut_and_marked_truncated():
    long = step("s", "ledger", [attempt(0, 1)], output="x" * (MAX_STEP_OUTPUT_CHARS + 10))
    assert long.output_truncated and len(long.output) == MAX_STEP_OUTPUT_CHARS
    short = step("s", "ledger", [attempt(0, 1)], output={"ok": True})
    assert short.output == {"ok": True} and not short.output_truncated
    structured = step("s", "ledger", [attempt(0, 1)], output={"rows": ["y" * 100] * 100})
    assert structured.output_truncated and isinstance(structured.output, str)


def test_an_attempt_keeps_a_bounded_error_description_and_a_known_status():
    failed = Assembly.Attempt(
        number=1, started_at=T0, finished_at=T0, status="failed", error=describe_error(ValueError("e" * 2000))
    )
    assert failed.error.startswith("ValueError: eee") and len(failed.error) == 500
    with pytest.raises(ValueError, match="status 'done'"):
        Assembly.Attempt(number=1, started_at=T0, finished_at=T0, status="done")


def test_a_trajectory_round_trips_through_its_stored_form(investigation):
    assert Assembly.Trajectory.from_list(investigation.to_list()).steps == investigation.steps


def result(text, state=None):
    return RunResult(
        message=Message(role="assistant", content=text),
        stop_reason="end_turn",
        usage=Usage(),
        messages=(),
        state=state or {},
    )


def test_graph_state_reads_results_by_node_and_the_single_previous_result():
    triage = result("billing")
    state = Graph.State(
        input=Message(role="user", content="Charged twice"),
        results={"triage": triage},
        incoming_results={"triage": triage},
        current="billing",
        step=2,
    )
    assert state.result("triage").output == "billing"
    assert (state.previous, state.previous_result().output, state.predecessors) == ("triage", "billing", ("triage",))
    with pytest.raises(KeyError, match=r"node 'respond' has no completed result \(completed: triage\)"):
        state.result("respond")


def test_graph_state_keeps_fan_in_predecessors_in_declaration_order_without_a_previous():
    state = Graph.State(input=None, incoming_results={"ledger": result("a"), "policy": result("b")})
    assert state.predecessors == ("ledger", "policy")
    assert state.previous is None and state.previous_result() is None


def test_graph_state_is_a_frozen_copy_that_callbacks_cannot_change():
    context = {"account": {"id": 7}, "tags": ["vip"]}
    working = {"notes": ["first"]}
    state = Graph.State(
        input=None,
        results={"triage": result("billing", state=working)},
        context=context,
        history=[Message(role="user", content="hi")],
        error=ValueError("boom"),
    )
    context["account"]["id"] = 8
    working["notes"].append("second")
    assert state.context["account"]["id"] == 7 and state.context["tags"] == ("vip",)
    assert state.result("triage").state["notes"] == ("first",)
    assert isinstance(state.results, MappingProxyType) and isinstance(state.history, tuple)
    with pytest.raises(TypeError):
        state.context["account"] = {}  # type: ignore[index]
    with pytest.raises(AttributeError):
        state.current = "elsewhere"  # type: ignore[misc]
    assert str(state.error) == "boom"
