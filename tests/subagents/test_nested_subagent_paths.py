"""A subagent's own subagents are placed below its path (/root/alpha/x), as the spec's AgentPath rules
nest delegations: in the ids its model is given and in the agent_path of the agent_stream wrappers
that carry their events to the top caller's stream."""

from __future__ import annotations

import json

from lg_core import Agent
from lg_core.subagents.declarations import subagent


def _tool_texts(request) -> list[str]:
    return [
        "".join(getattr(part, "text", "") for part in block.content)
        for message in request.messages
        if message.role == "tool"
        for block in message.content
    ]


def _delegating(kind: str, task_name: str):
    """A model that spawns one child, waits for it, then answers naming the child's id and response."""

    def turn(request) -> dict:
        for text in _tool_texts(request):
            if text.startswith("{") and '"subagents"' in text:
                done = [v for v in json.loads(text)["subagents"] if v["status"] == "completed"]
                if done:
                    return {"text": f"{done[0]['subagent_id']} said {done[0]['response']}"}
        calls = sum(1 for m in request.messages if m.role == "assistant")
        if calls == 0:
            arguments = {"kind": kind, "task_name": task_name, "task": "dig"}
            return {"tool_calls": [{"id": "s1", "name": "spawn_subagent", "arguments": arguments}]}
        return {"tool_calls": [{"id": f"w{calls}", "name": "wait_for_subagents", "arguments": {}}]}

    return turn


def _agents(script) -> type[Agent]:
    leaf = type("LeafAgent", (Agent,), {"model": script([{"text": "leaf notes"}]), "description": "Digs"})
    middle = type(
        "MiddleAgent",
        (Agent,),
        {
            "model": script(_delegating("leaf", "x")),
            "description": "Delegates digging",
            "subagents": [subagent(leaf, kind="leaf")],
            "subagent_long_poll_duration": 5.0,
        },
    )
    return type(
        "TopAgent",
        (Agent,),
        {
            "model": script(_delegating("middle", "alpha")),
            "subagents": [subagent(middle, kind="middle")],
            "subagent_long_poll_duration": 5.0,
        },
    )


def test_a_subagents_own_subagent_gets_a_path_below_its_own(config, script):
    run = _agents(script).ask("go")

    assert run.completed, run.error
    assert run.response == "/root/alpha said /root/alpha/x said leaf notes"


def test_the_grandchilds_events_reach_the_top_stream_under_its_nested_agent_path(config, script):
    run = _agents(script).stream_ask("go", include_agent_events=True)
    sources = [event.data["source"] for event in run if event.type == "agent_stream"]

    assert run.completed, run.error
    paths = {(source.agent_id, source.agent_path) for source in sources}
    assert ("leaf", "/root/alpha/x") in paths
    assert ("middle", "/root/alpha") in paths
    assert all(path != "/root/x" for _, path in paths)
