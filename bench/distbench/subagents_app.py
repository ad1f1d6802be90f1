"""The parent Agent of bench/subagents.py; workers import it by the Agent's path.

BenchDelegatingAgent  spawns CHILDREN research subagents at once, waits for them, and
                      answers once every child has; each child's model waits
                      CHILD_SECONDS, so the run's time beyond its slowest child is what
                      the engine, the parked waits and the workers add.
"""

from __future__ import annotations

import json

from lg_core import Agent
from lg_core.providers import scripted
from lg_core.subagents.declarations import subagent

CHILD_SECONDS = 1.0
CHILDREN = ("a", "b", "c", "d")


def _parent(request):
    calls = sum(1 for message in request.messages if message.role == "assistant")
    if calls == 0:
        spawns = [
            {
                "id": f"s{name}",
                "name": "spawn_subagent",
                "arguments": {"kind": "research", "task_name": name, "task": name},
            }
            for name in CHILDREN
        ]
        return {"tool_calls": spawns}
    answered = set()
    for message in request.messages:
        if message.role != "tool":
            continue
        for block in message.content:
            text = "".join(getattr(part, "text", "") for part in block.content)
            if text.startswith("{") and '"subagents"' in text:
                answered |= {v["subagent_id"] for v in json.loads(text)["subagents"] if v["status"] == "completed"}
    if len(answered) == len(CHILDREN):
        return {"text": "all answered"}
    return {"tool_calls": [{"id": f"w{calls}", "name": "wait_for_subagents", "arguments": {}}]}


scripted.register("bench-subagents-parent", _parent)
scripted.register("bench-subagents-child", lambda request: {"text": "found", "delay": CHILD_SECONDS})


class BenchResearchAgent(Agent):
    model = "scripted:bench-subagents-child"
    description = "Investigates one question"


class BenchDelegatingAgent(Agent):
    model = "scripted:bench-subagents-parent"
    subagents = [subagent(BenchResearchAgent, kind="research")]
    limits = {"max_turns": 40}


__all__ = ["CHILDREN", "CHILD_SECONDS", "BenchDelegatingAgent"]
