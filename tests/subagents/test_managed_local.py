"""Managed subagents run locally: a parent delegates to two research children, follows one up, waits
and answers from both; the manager's bounds reach the model as tool errors and the run goes on."""

import json

import pytest

from lg_core import Agent
from lg_core.errors import ConfigurationError
from lg_core.providers import scripted
from lg_core.runtime import current_runtime
from lg_core.subagents.declarations import subagent
from lg_core.subagents.definition import Definition
from lg_core.usage import Usage


def _last_user_text(request):
    for message in reversed(request.messages):
        if message.role == "user":
            return message.text
    return ""


def _research_turn(request):
    """A child answers with its conversation so far: the user messages it has seen, in order."""
    seen = [m.text for m in request.messages if m.role == "user"]
    return {"text": "notes on " + " + ".join(seen)}


def _tool_results(request):
    results = []
    for message in request.messages:
        if message.role == "tool":
            for block in message.content:
                results.append("".join(getattr(part, "text", "") for part in block.content))
    return results


def _parent_turn(request):
    """Spawn alpha and beta, send alpha a follow-up, wait until both answers are in, then answer."""
    results = _tool_results(request)
    model_calls = sum(1 for m in request.messages if m.role == "assistant")
    if model_calls == 0:
        return {
            "tool_calls": [
                {
                    "id": "s1",
                    "name": "spawn_subagent",
                    "arguments": {"kind": "research", "task_name": "alpha", "task": "alpha?"},
                },
                {
                    "id": "s2",
                    "name": "spawn_subagent",
                    "arguments": {"kind": "research", "task_name": "beta", "task": "beta?"},
                },
            ]
        }
    if model_calls == 1:
        return {
            "tool_calls": [
                {
                    "id": "m1",
                    "name": "send_subagent_message",
                    "arguments": {"subagent_id": "/root/alpha", "message": "more?"},
                }
            ]
        }
    answers = {}
    for text in results:
        if text.startswith("{") and '"subagents"' in text:
            for view in json.loads(text)["subagents"]:
                if "response" in view and view["status"] != "working":
                    answers[view["subagent_id"]] = view["response"]
    if answers.get("/root/alpha") == "notes on alpha? + more?" and "/root/beta" in answers:
        return {"text": f"alpha: {answers['/root/alpha']}; beta: {answers['/root/beta']}"}
    return {"tool_calls": [{"id": f"w{model_calls}", "name": "wait_for_subagents", "arguments": {}}]}


@pytest.fixture
def scripts():
    scripted.register("research-child", _research_turn)
    scripted.register("support-parent", _parent_turn)
    yield
    scripted.unregister("research-child")
    scripted.unregister("support-parent")


class ResearchAgent(Agent):
    model = "scripted:research-child"
    description = "Investigates a bounded question"


class SupportAgent(Agent):
    model = "scripted:support-parent"
    subagents = [subagent(ResearchAgent, kind="research")]
    subagent_long_poll_duration = 5.0
    limits = {"max_turns": 30}


def test_a_parent_spawns_two_children_follows_one_up_waits_and_answers_from_both(scripts):
    run = SupportAgent.ask("help me")
    assert run.completed, run.error
    assert run.response == "alpha: notes on alpha? + more?; beta: notes on beta?"
    children = current_runtime().store.list_child_runs(run.id)
    assert sorted(child.status for child in children) == ["completed"] * 3  # alpha's two turns, beta's one
    child_output = sum(Usage.from_dict(child.usage).output_tokens for child in children)
    assert run.usage.output_tokens > child_output > 0  # the children's usage is counted in the parent's


def test_declaring_something_other_than_a_subagent_is_refused():
    with pytest.raises(ConfigurationError, match="neither a subagent"):

        class Bad(Agent):
            model = "scripted"
            subagents = [ResearchAgent]


def test_a_kind_declared_twice_is_refused():
    with pytest.raises(ConfigurationError, match="twice"):

        class Twice(Agent):
            model = "scripted"
            subagents = [subagent(ResearchAgent, kind="research"), subagent(ResearchAgent, kind="research")]


def test_a_bad_long_poll_duration_is_refused():
    with pytest.raises(ConfigurationError, match="subagent_long_poll_duration"):

        class Slow(Agent):
            model = "scripted"
            subagents = [subagent(ResearchAgent, kind="research")]
            subagent_long_poll_duration = -1


def test_the_childrens_events_reach_the_parents_stream_under_their_agent_paths(scripts):
    run = SupportAgent.stream_ask("help me", include_agent_events=True)
    sources = [event.data["source"] for event in run if event.type == "agent_stream"]
    assert run.completed, run.error
    delegated = {source.agent_path for source in sources if source.agent_id == "research"}
    assert delegated == {"/root/alpha", "/root/beta"}
    assert all(source.assembly_path == () for source in sources if source.agent_id == "research")


def test_a_per_run_resolver_supplies_the_kinds_a_run_may_spawn(scripts):
    asked = []

    def research_for(invocation):
        asked.append(invocation.message.text)
        return [Definition("research", "Investigates a bounded question", lambda agent_path: ResearchAgent)]

    class ResolvingSupportAgent(Agent):
        model = "scripted:support-parent"
        subagents = [research_for]
        subagent_long_poll_duration = 5.0
        limits = {"max_turns": 30}

    run = ResolvingSupportAgent.ask("help me")
    assert run.completed, run.error
    assert run.response == "alpha: notes on alpha? + more?; beta: notes on beta?"
    assert set(asked) == {"help me"}


def test_two_resolvers_are_refused():
    with pytest.raises(ConfigurationError, match="at most one"):

        class TwoResolvers(Agent):
            model = "scripted"
            subagents = [lambda invocation: [], lambda invocation: []]


def test_max_concurrent_runs_one_turn_at_a_time_when_it_is_one(scripts):
    class OneAtATime(Agent):
        model = "scripted:support-parent"
        subagents = [subagent(ResearchAgent, kind="research")]
        subagent_limits = {"max_concurrent": 1}
        subagent_long_poll_duration = 5.0
        limits = {"max_turns": 30}

    scripted.register("research-child", lambda request: {**_research_turn(request), "delay": 0.2})
    run = OneAtATime.ask("help me")
    assert run.completed, run.error
    spans = sorted((child.created_at, child.finished_at) for child in current_runtime().store.list_child_runs(run.id))
    assert len(spans) == 3
    assert all(finished <= next_start for (_, finished), (next_start, _) in zip(spans, spans[1:], strict=False))


def test_an_interjection_reaches_the_running_turn_of_a_child_and_answers_with_its_next_model_response():
    from lg_core import Tool

    class NoteTool(Tool):
        tool_name = "note"
        description = "Take a note."

        def call(self, input):
            return "noted"

    def child(request):
        if not any(m.role == "tool" for m in request.messages):
            return {"tool_calls": [{"name": "note", "arguments": {}}], "delay": 0.5}
        return {"text": "notes on " + " + ".join(m.text for m in request.messages if m.role == "user")}

    def parent(request):
        results = _tool_results(request)
        if not results:
            arguments = {"kind": "research", "task_name": "alpha", "task": "alpha?"}
            return {"tool_calls": [{"id": "s", "name": "spawn_subagent", "arguments": arguments}]}
        last = results[-1]
        if '"ready"' in last:
            return {"text": json.loads(last)["subagents"][0]["response"]}
        if '"answered"' in last:
            interjections.append(json.loads(last))
            if interjections[-1]["response_disposition"] == "final":  # the child's turn ends with this response
                return {"text": interjections[-1]["response"]}
            return {"tool_calls": [{"id": f"w{len(results)}", "name": "wait_for_subagents", "arguments": {}}]}
        # Spawned, or refused because the turn's child run has not started yet: interject (again).
        arguments = {"subagent_id": "/root/alpha", "message": "hurry"}
        return {"tool_calls": [{"id": f"i{len(results)}", "name": "interject_subagent", "arguments": arguments}]}

    interjections = []

    class Noting(Agent):
        model = "scripted:interjected-child"
        description = "Investigates, taking notes first"
        tools = [NoteTool]

    class Interjecting(Agent):
        model = "scripted:interjecting-parent"
        subagents = [subagent(Noting, kind="research")]
        subagent_long_poll_duration = 5.0
        limits = {"max_turns": 40}

    scripted.register("interjected-child", child)
    scripted.register("interjecting-parent", parent)
    try:
        run = Interjecting.ask("go")
    finally:
        scripted.unregister("interjected-child")
        scripted.unregister("interjecting-parent")
    assert run.completed, run.error
    assert run.response == "notes on alpha? + hurry"
    # Read by the turn's first model response (which asked for the note) or by the one after the note.
    (answered,) = interjections
    assert answered["subagent_id"] == "/root/alpha"
    assert (answered["response_disposition"], answered["response"]) in {
        ("tool_calls", ""),
        ("final", "notes on alpha? + hurry"),
    }


def test_an_interjection_the_childs_model_has_not_answered_when_the_long_poll_passes_answers_still_working():
    answers = []

    def child(request):
        return {"text": "late notes", "delay": 1.5}

    def parent(request):
        results = _tool_results(request)
        if not results:
            arguments = {"kind": "research", "task_name": "alpha", "task": "alpha?"}
            return {"tool_calls": [{"id": "s", "name": "spawn_subagent", "arguments": arguments}]}
        last = results[-1]
        if '"interjection"' in last:
            answers.append(json.loads(last))
        if '"ready"' in last:
            return {"text": json.loads(last)["subagents"][0]["response"]}
        if '"interjection"' in last or '"subagents"' in last:  # answered, or a wait still working: wait (again)
            return {"tool_calls": [{"id": f"w{len(results)}", "name": "wait_for_subagents", "arguments": {}}]}
        arguments = {"subagent_id": "/root/alpha", "message": "hurry"}
        return {"tool_calls": [{"id": f"i{len(results)}", "name": "interject_subagent", "arguments": arguments}]}

    class Slow(Agent):
        model = "scripted:slow-child"
        description = "Investigates slowly"

    class Interjecting(Agent):
        model = "scripted:impatient-interjector"
        subagents = [subagent(Slow, kind="research")]
        subagent_long_poll_duration = 0.3
        limits = {"max_turns": 60}

    scripted.register("slow-child", child)
    scripted.register("impatient-interjector", parent)
    try:
        run = Interjecting.ask("go")
    finally:
        scripted.unregister("slow-child")
        scripted.unregister("impatient-interjector")
    assert run.completed, run.error
    assert [(a["subagent_id"], a["status"]) for a in answers] == [("/root/alpha", "still_working")]
    assert run.response == "late notes"  # the interjection did not stop the child: its turn went on
