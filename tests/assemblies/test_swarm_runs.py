"""Swarm runs in local mode: one active member at a time, each member execution a child run.

The scripted models answer or call the ``handoff`` tool; the assertions read the run's
answer, its trajectory and journey, the caller's stream, and the member runs left in the store.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

import lg_core
from lg_core import Agent, Graph, Message, Swarm, edge, member
from lg_core.assemblies.child_runs import child_run_id
from lg_core.errors import ConfigurationError, InvocationError
from tests.assemblies import resumable_swarm


def agent(name: str, target: str, description: str = "") -> type[Agent]:
    return type(name, (Agent,), {"model": target, "description": description})


def handoff(to: str, message: str, text: str = "") -> dict:
    turn: dict = {"tool_calls": [{"name": "handoff", "arguments": {"to": to, "message": message}}]}
    if text:
        turn["text"] = text
    return turn


def last_input(request) -> str:
    return request.messages[-1].text


def tool_result_text(request) -> str:
    """The text of the tool results the model reads in this turn (empty when none)."""
    message = request.messages[-1]
    return "".join(getattr(block, "text", "") for item in message.content for block in getattr(item, "content", ()))


def offered(request) -> dict:
    return {tool.name: tool for tool in request.tools}


def member_runs(config, run) -> list:
    """The child runs of a Swarm run's member executions, in order."""
    store = config.runtime().store
    frame = store.load_frame(f"{run.id}/root")
    return [store.load_run(record["child_run_id"]) for record in frame.checkpoint["data"]["done"]]


@pytest.fixture
def problem_solver(script):
    """ProblemSolverSwarm with scripted triage and billing turns; account opts in to history and context."""

    def build(triage_turns, billing_turns, account_turns=None, **bounds):
        triage = agent("TriageAgent", script(triage_turns), "routes the request")
        billing = agent("BillingAgent", script(billing_turns), "charges, refunds and invoices")
        account = agent("AccountAgent", script(account_turns or [{"text": "account answer"}]), "logins")

        class ProblemSolverSwarm(Swarm):
            members = [triage, billing, member(account, history=True, context=True)]
            start = triage
            handoffs = {triage: [billing, account], billing: [triage], account: [triage]}
            max_steps = bounds.get("max_steps", 10)
            max_handoff_repeats = bounds.get("max_handoff_repeats", 2)

        return ProblemSolverSwarm

    return build


def test_the_start_member_answers_directly(config, problem_solver):
    seen = []

    def triage(request):
        seen.append(request)
        return {"text": "You were charged once; the second line is a hold."}

    swarm = problem_solver(triage, [{"text": "unused"}])
    run = swarm.ask("Why was I charged twice?")

    assert run.completed, run.error
    assert run.response == "You were charged once; the second line is a hold."
    assert [step.participant for step in run.result.trajectory] == ["triage"]
    assert run.result.journey == {
        "final_member": "triage",
        "member_executions": 1,
        "handoffs": [],
        "omitted_handoffs": 0,
    }
    tool = offered(seen[0])["handoff"]
    assert list(tool.input_schema["properties"]["to"]["enum"]) == ["billing", "account"]
    assert "- billing: charges, refunds and invoices" in tool.description


def test_triage_hands_off_to_billing_which_answers(config, problem_solver):
    billing_requests = []

    def billing(request):
        billing_requests.append(request)
        return {"text": "billing answer: refund issued"}

    swarm = problem_solver([handoff("billing", "Customer sees two charges on 3 May.")], billing)
    run = swarm.ask("Why was I charged twice?")

    assert run.completed, run.error
    assert run.response == "billing answer: refund issued"
    trajectory = run.result.trajectory
    assert [step.participant for step in trajectory] == ["triage", "billing"]
    assert trajectory.transitions() == [("triage-1", "billing-2")]
    assert trajectory.find("triage").output == {
        "handoff": {"to": "billing", "message": "Customer sees two charges on 3 May."}
    }
    assert run.result.journey["handoffs"] == [
        {"from": "triage", "to": "billing", "message": "Customer sees two charges on 3 May."}
    ]
    assert run.result.journey["final_member"] == "billing"
    received = last_input(billing_requests[0])
    assert received.startswith("Why was I charged twice?")
    assert "Handoff note from the triage member" in received and "not as permission" in received
    assert list(offered(billing_requests[0])["handoff"].input_schema["properties"]["to"]["enum"]) == ["triage"]
    triage_run, billing_run = member_runs(config, run)
    assert triage_run.status == "completed" and triage_run.result["ended_by"]["value"]["to"] == "billing"
    assert billing_run.parent_run_id == run.id
    again = config.runtime().get_run(run.id)
    assert again.result.journey == run.result.journey


def test_an_undeclared_route_is_refused_as_a_tool_error_and_the_member_goes_on(config, script):
    replies = []

    def triage(request):
        if request.messages[-1].role == "tool":
            replies.append(tool_result_text(request))
            return {"text": "I will answer this one myself."}
        return handoff("account", "log in trouble")

    triage_agent = agent("TriageAgent", script(triage))
    billing = agent("BillingAgent", script([{"text": "unused"}]))
    account = agent("AccountAgent", script([{"text": "unused"}]))

    class NarrowSwarm(Swarm):
        members = [triage_agent, billing, account]
        start = triage_agent
        handoffs = {triage_agent: [billing], billing: [account]}

    run = NarrowSwarm.ask("I cannot log in")

    assert run.completed, run.error
    assert run.response == "I will answer this one myself."
    assert "triage cannot hand off to 'account'; it may hand off to billing" in replies[0]
    assert [step.participant for step in run.result.trajectory] == ["triage"]


def test_a_member_without_a_route_is_offered_no_handoff_tool(config, script):
    seen = []
    triage = agent("TriageAgent", script([handoff("billing", "over to you")]))
    billing = agent("BillingAgent", script(lambda request: seen.append(request) or {"text": "done"}))

    class OneWaySwarm(Swarm):
        members = [triage, billing]
        start = triage
        handoffs = {triage: [billing]}

    run = OneWaySwarm.ask("Refund please")

    assert run.completed, run.error
    assert "handoff" not in offered(seen[0])


def test_max_handoff_repeats_refuses_the_repeated_route(config, problem_solver):
    triage_replies = []

    def triage(request):
        if request.messages[-1].role == "tool":
            triage_replies.append(tool_result_text(request))
            return {"text": "triage answers after all"}
        return handoff("billing", "again")

    swarm = problem_solver(triage, [handoff("triage", "back to you")], max_handoff_repeats=1)
    run = swarm.ask("Why was I charged twice?")

    assert run.completed, run.error
    assert run.response == "triage answers after all"
    assert [step.participant for step in run.result.trajectory] == ["triage", "billing", "triage"]
    assert "the handoff from triage to billing was already taken 1 times" in triage_replies[0]


def test_max_steps_leaves_the_active_member_to_answer(config, problem_solver):
    billing_replies = []

    def billing(request):
        if request.messages[-1].role == "tool":
            billing_replies.append(tool_result_text(request))
            return {"text": "billing answers with what it has"}
        return handoff("triage", "back to you")

    swarm = problem_solver([handoff("billing", "charges")], billing, max_steps=2)
    run = swarm.ask("Why was I charged twice?")

    assert run.completed, run.error
    assert run.response == "billing answers with what it has"
    assert "this request has used its 2 member executions" in billing_replies[0]
    assert run.result.journey["member_executions"] == 2


def test_the_callers_ordinary_stream_carries_handoffs_and_only_the_final_members_text(config, problem_solver):
    """Every member's text reaches the caller inside its ``agent_stream`` wrappers; the ordinary
    events carry only the final member's."""
    swarm = problem_solver(
        [handoff("billing", "two charges", text="INTERMEDIATE: let me pass you to billing")],
        [{"text": "FINAL: a refund is on its way"}],
    )
    stream = swarm.stream_ask("Why was I charged twice?")
    everything = list(stream)
    events = [event for event in everything if event.type != "agent_stream"]

    assert stream.completed, stream.error
    intermediate = [event for event in everything if "INTERMEDIATE" in repr(dict(event.data))]
    assert intermediate and all(event.type == "agent_stream" for event in intermediate)
    assert {event.data["source"].assembly_path[-1].participant for event in intermediate} == {"triage"}
    types = [event.type for event in events]
    assert types[0] == "invocation_start" and types[-1] == "run_stop"
    handoffs = [dict(event.data) for event in events if event.type == "handoff"]
    assert handoffs == [{"source": "triage", "target": "billing", "message": "two charges", "member_executions": 2}]
    texts = [event.data["text"] for event in events if event.type == "text_delta"]
    assert texts == ["FINAL: a refund is on its way"]
    assert not any("INTERMEDIATE" in repr(dict(event.data)) for event in events)
    assert stream.response == "FINAL: a refund is on its way"


def test_history_and_context_reach_only_the_members_that_opt_in(config, problem_solver):
    account_requests, triage_requests = [], []

    def triage(request):
        triage_requests.append(request)
        return handoff("account", "login trouble")

    def account(request):
        account_requests.append(request)
        return {"text": "account answer"}

    swarm = problem_solver(triage, [{"text": "unused"}], account)
    history = [Message("user", "earlier question"), Message("assistant", "earlier answer")]
    run = swarm.ask("I cannot log in", history=history, context={"account_id": "acct-7"})

    assert run.completed, run.error
    assert [message.text for message in triage_requests[0].messages] == ["I cannot log in"]
    assert [message.text for message in account_requests[0].messages][:2] == ["earlier question", "earlier answer"]
    triage_run, account_run = member_runs(config, run)
    assert not triage_run.invocation.get("history") and not triage_run.invocation.get("context")
    assert account_run.invocation["context"] == {"account_id": "acct-7"}


def test_a_swarm_runs_as_a_graph_node(config, problem_solver, script):
    swarm = problem_solver([handoff("billing", "charges")], [{"text": "refund issued"}])
    respond = agent("RespondAgent", script(lambda request: {"text": "final: " + last_input(request)}))

    class SupportGraph(Graph):
        nodes = {"solve": swarm, "respond": respond}
        start = "solve"
        edges = [edge("solve", "respond")]
        finish = "respond"

    run = SupportGraph.ask("Why was I charged twice?")

    assert run.completed, run.error
    assert "From solve:\nrefund issued" in run.response
    step = run.result.trajectory.find("solve")
    assert step.assembly_kind == "swarm" and step.output == "refund issued"


def test_a_failed_member_fails_the_swarm_and_a_fork_or_model_override_is_refused(config, problem_solver):
    swarm = problem_solver([handoff("billing", "charges")], [{"error": "provider down"}])
    run = swarm.ask("Why was I charged twice?")

    assert run.failed
    assert "swarm member billing" in str(run.error)
    with pytest.raises(InvocationError, match="swarm run, which cannot be forked"):
        lg_core.fork(run.id, from_step="root/node-1/triage")
    with pytest.raises(InvocationError, match="model_override"):
        swarm.ask("Why?", model_override="scripted:other")


def test_cancelling_a_swarm_run_cancels_the_active_member_and_ends_the_run_cancelled(config, problem_solver):
    swarm = problem_solver([{"text": "late", "delay": 30}], [{"text": "unused"}])
    run = swarm.stream_ask("Go")
    events = iter(run)
    assert next(events).type == "invocation_start"
    timer = threading.Timer(0.3, run.cancel)
    timer.start()
    rest = list(events)
    timer.join()

    assert run.cancelled
    assert rest[-1].type == "run_cancel"
    store = config.runtime().store
    [member_step] = [step for step in store.load_steps(run.id) if step.kind == "graph_node"]
    assert store.load_run(child_run_id(run.id, member_step.key)).status == "cancelled"


def test_a_swarm_deadline_reaches_its_active_member_and_ends_the_run_partial(config, problem_solver):
    swarm = problem_solver([{"text": "late", "delay": 30}], [{"text": "unused"}])
    started = time.monotonic()
    run = swarm.ask("Go", deadline_at=datetime.now(UTC) + timedelta(seconds=0.5))

    assert run.partial
    assert time.monotonic() - started < 10


def test_a_swarm_run_stopped_mid_member_resumes_without_running_a_committed_member_again(file_config):
    resumable_swarm.CALLS.clear()
    resumable_swarm.INTERRUPT_AT[:] = [2]  # billing's tool call stops the process
    with pytest.raises(KeyboardInterrupt):
        resumable_swarm.ResumableSwarm.ask("Why was I charged twice?", run_id="swarm-stopped")
    assert len(resumable_swarm.CALLS) == 2

    resumed = lg_core.resume("swarm-stopped")

    assert resumed.completed, resumed.error
    assert resumed.response == "billing: refund issued"
    assert [step.participant for step in resumed.result.trajectory] == ["triage", "billing"]
    first, second, again = resumable_swarm.CALLS
    assert second == again != first  # billing's child went on under its own key; triage never re-ran


def test_a_member_with_its_own_handoff_tool_is_refused_when_the_swarm_is_called(config, script):
    from lg_core import Tool

    class OwnHandoffTool(Tool):
        tool_name = "handoff"
        description = "The member's own tool of that name."

        def call(self, input):
            return "mine"

    triage = type("TriageAgent", (Agent,), {"model": script([{"text": "x"}]), "tools": [OwnHandoffTool]})
    billing = agent("BillingAgent", script([{"text": "y"}]))

    class ClashingSwarm(Swarm):
        members = [triage, billing]
        start = triage
        handoffs = {triage: [billing]}

    with pytest.raises(ConfigurationError, match="has a tool named 'handoff'"):
        ClashingSwarm.ask("Hi")
