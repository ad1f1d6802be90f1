"""Managed children kept in the parent's session: a later run of the session lists them without restoring
them and continues one's conversation; persist=False children, failed turns and other tenants get nothing."""

import json

import pytest

from lg_core import Agent, Configuration, SessionActorError, with_configuration
from lg_core.providers import scripted
from lg_core.subagents.declarations import subagent
from lg_core.subagents.persistence import conversation_session_id, registry_session_id


def _child_turn(request):
    """A child answers with its conversation so far (the user messages it has seen); "fail" fails the turn."""
    seen = [m.text for m in request.messages if m.role == "user"]
    if seen[-1] == "fail":
        return {"error": "the research source is down"}
    return {"text": "notes on " + " + ".join(seen)}


def _this_run(request):
    """The messages after the run's own input (earlier runs of the session come before it)."""
    last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
    return request.messages[last_user].text, request.messages[last_user + 1 :]


def _results(messages):
    return [
        (block.status, "".join(getattr(part, "text", "") for part in block.content))
        for message in messages
        if message.role == "tool"
        for block in message.content
    ]


def _parent_turn(request):
    """``spawn <kind> <task>``: spawn /root/alpha and wait for it; ``follow``: list, send alpha "more?", wait.

    Answers with every tool result of the run as JSON once a wait reports ready."""
    command, messages = _this_run(request)
    made = sum(1 for m in messages if m.role == "assistant")
    results = _results(messages)
    if command.startswith("spawn "):
        _, kind, task = command.split(" ", 2)
        calls = [("spawn_subagent", {"kind": kind, "task_name": "alpha", "task": task})]
    else:
        calls = [
            ("list_subagents", {}),
            ("send_subagent_message", {"subagent_id": "/root/alpha", "message": "more?"}),
        ]
    if made < len(calls):
        name, arguments = calls[made]
        return {"tool_calls": [{"id": f"c{made}", "name": name, "arguments": arguments}]}
    if results and '"status": "ready"' in results[-1][1] or made > 12:
        return {"text": json.dumps(results)}
    return {"tool_calls": [{"id": f"w{made}", "name": "wait_for_subagents", "arguments": {}}]}


class KeptResearchAgent(Agent):
    model = "scripted:kept-child"
    description = "Investigates a bounded question"


class KeepingParent(Agent):
    model = "scripted:kept-parent"
    subagents = [
        subagent(KeptResearchAgent, kind="research"),
        subagent(KeptResearchAgent, kind="scratch", persist=False),
    ]
    subagent_long_poll_duration = 5.0
    limits = {"max_turns": 30}


@pytest.fixture(params=["sql", "memory"])
def config(request):
    """Sessions in the run store's database (written in the turn's commit) and elsewhere (just before it)."""
    scripted.register("kept-child", _child_turn)
    scripted.register("kept-parent", _parent_turn)
    configuration = Configuration(session_store=request.param)
    with with_configuration(configuration):
        yield configuration
    configuration.close()
    scripted.unregister("kept-child")
    scripted.unregister("kept-parent")


def _ask(command, session_id="conv-1", actor_id="acme"):
    run = KeepingParent.ask(command, session_id=session_id, actor_id=actor_id)
    assert run.completed, run.error
    return json.loads(run.response)


def _listing(results):
    status, text = results[0]
    assert status == "success", text
    return json.loads(text)["subagents"]


def test_a_later_run_of_the_session_lists_the_child_and_its_follow_up_continues_the_conversation(config):
    first = _ask("spawn research alpha?")
    assert "notes on alpha?" in first[-1][1]

    second = _ask("follow")
    listed = _listing(second)
    assert [(view["subagent_id"], view["status"], view["completed_turns"]) for view in listed] == [
        ("/root/alpha", "completed", 1)
    ]
    assert listed[0]["response"] == "notes on alpha?"
    assert second[1][0] == "success", second[1][1]
    assert "notes on alpha? + more?" in second[-1][1]  # the restored transcript is the turn's history


def test_a_child_whose_kind_does_not_persist_lives_for_one_invocation(config):
    _ask("spawn scratch alpha?")

    second = _ask("follow")
    assert _listing(second) == []
    assert second[1][0] == "error" and "no subagent '/root/alpha'" in second[1][1]


def test_a_failed_turn_never_becomes_history(config):
    first = _ask("spawn research fail")
    assert '"failed"' in first[-1][1]
    store = config.runtime().session_store
    assert store.load(registry_session_id("conv-1", "acme"), actor_id="acme") is None

    second = _ask("follow")
    assert _listing(second) == []


def test_the_children_belong_to_the_parents_tenant_and_another_is_refused(config):
    _ask("spawn research alpha?")
    store = config.runtime().session_store
    registry = store.load(registry_session_id("conv-1", "acme"), actor_id="acme")
    (entry,) = registry.state["subagents"]
    assert entry["subagent_id"] == "/root/alpha" and entry["history_run"] is None  # no run ids kept
    conversation = conversation_session_id(entry["conversation_id"])
    assert [m.text for m in store.load(conversation, actor_id="acme").messages] == ["alpha?", "notes on alpha?"]
    with pytest.raises(SessionActorError):
        store.load(conversation, actor_id="globex")

    other = KeepingParent.ask("follow", session_id="conv-1", actor_id="globex")
    assert other.failed and isinstance(other.error, SessionActorError)
