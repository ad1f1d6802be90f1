"""A parent Agent with managed research subagents, for the distributed tests.

The parent spawns ``alpha`` and ``beta``, sends ``alpha`` a follow-up, waits until both
have answered, then answers from both; a child answers with the messages of its
conversation so far, so the follow-up's answer shows it continued its first turn.
Every child turn records a side effect through ``effect`` (logged by dist_app), so a
test can tell that no committed turn ran again; $DIST_APP_HANG="effect:<n>" makes that
turn's call hang (dist_app). ``$DIST_APP_CHILD_DELAY`` (seconds)
makes each child's model wait before answering.
"""

from __future__ import annotations

import json
import os

import dist_app

from lg_core import Agent, Tool
from lg_core.providers import scripted
from lg_core.subagents.declarations import subagent

FINAL = "alpha: notes on alpha? + more?; beta: notes on beta?"
# The number each child turn's side effect is logged under (dist_app's log holds integers).
TOPICS = {"alpha?": 1, "beta?": 2, "more?": 3}


class TurnEffectTool(Tool):
    tool_name = "effect"
    description = "Record the child turn's side effect."
    input_schema = {
        "type": "object",
        "properties": {"topic": {"type": "string"}},
        "required": ["topic"],
        "additionalProperties": False,
    }

    def call(self, input):
        n = TOPICS[input["topic"]]
        dist_app._log(self.tool_name, n, self.idempotency_key)
        dist_app._maybe_hang(self.tool_name, n, self.idempotency_key)
        return "recorded"


def _research_turn(request):
    if request.messages[-1].role == "tool":
        seen = [m.text for m in request.messages if m.role == "user"]
        return {"text": "notes on " + " + ".join(seen)}
    delay = float(os.environ.get("DIST_APP_CHILD_DELAY", "0") or 0)
    return {"tool_calls": [{"name": "effect", "arguments": {"topic": request.messages[-1].text}}], "delay": delay}


def _tool_texts(request):
    for message in request.messages:
        if message.role == "tool":
            for block in message.content:
                yield "".join(getattr(part, "text", "") for part in block.content)


def _parent_turn(request):
    calls = sum(1 for m in request.messages if m.role == "assistant")
    if calls == 0:
        return {
            "tool_calls": [
                {"id": "s1", "name": "spawn_subagent", "arguments": _spawn("alpha")},
                {"id": "s2", "name": "spawn_subagent", "arguments": _spawn("beta")},
            ]
        }
    if calls == 1:
        follow_up = {"subagent_id": "/root/alpha", "message": "more?"}
        return {"tool_calls": [{"id": "m1", "name": "send_subagent_message", "arguments": follow_up}]}
    answers = {}
    for text in _tool_texts(request):
        if text.startswith("{") and '"subagents"' in text:
            for view in json.loads(text)["subagents"]:
                if "response" in view and view["status"] != "working":
                    answers[view["subagent_id"]] = view["response"]
    if answers.get("/root/alpha") == "notes on alpha? + more?" and "/root/beta" in answers:
        return {"text": f"alpha: {answers['/root/alpha']}; beta: {answers['/root/beta']}"}
    return {"tool_calls": [{"id": f"w{calls}", "name": "wait_for_subagents", "arguments": {}}]}


def _spawn(name):
    return {"kind": "research", "task_name": name, "task": f"{name}?"}


scripted.register("dist-research-child", _research_turn)
scripted.register("dist-support-parent", _parent_turn)


class DistResearchAgent(Agent):
    model = "scripted:dist-research-child"
    description = "Investigates a bounded question"
    tools = [TurnEffectTool]


class DistSupportAgent(Agent):
    model = "scripted:dist-support-parent"
    subagents = [subagent(DistResearchAgent, kind="research")]
    subagent_long_poll_duration = 30.0
    limits = {"max_turns": 40}


def _impatient_turn(request):
    """Spawn alpha, then wait until its answer is in; answer with the statuses the waits returned."""
    calls = sum(1 for m in request.messages if m.role == "assistant")
    if calls == 0:
        return {"tool_calls": [{"id": "s1", "name": "spawn_subagent", "arguments": _spawn("alpha")}]}
    statuses = []
    for text in _tool_texts(request):
        if text.startswith("{") and '"subagents"' in text:
            statuses.append(json.loads(text)["status"])
    if statuses and statuses[-1] == "ready":
        return {"text": " ".join(statuses)}
    return {"tool_calls": [{"id": f"w{calls}", "name": "wait_for_subagents", "arguments": {}}]}


scripted.register("dist-impatient-parent", _impatient_turn)


class DistImpatientAgent(Agent):
    """Waits with a 1 s long poll on a child that takes longer: its first waits end still_working."""

    model = "scripted:dist-impatient-parent"
    subagents = [subagent(DistResearchAgent, kind="research")]
    subagent_long_poll_duration = 1.0
    limits = {"max_turns": 40}


def _sync_turn(request):
    """Spawn alpha synchronously; answer with what the spawn returned."""
    if not any(m.role == "tool" for m in request.messages):
        arguments = {**_spawn("alpha"), "mode": "sync"}
        return {"tool_calls": [{"id": "s1", "name": "spawn_subagent", "arguments": arguments}]}
    return {"text": next(_tool_texts(request))}


scripted.register("dist-sync-parent", _sync_turn)


class DistSyncAgent(Agent):
    """Spawns one child in sync mode: on a worker the spawn's step parks until the child's turn ends."""

    model = "scripted:dist-sync-parent"
    subagents = [subagent(DistResearchAgent, kind="research")]


def _keeping_turn(request):
    """``spawn``: spawn alpha in sync mode; ``follow``: list the session's children, then send alpha
    "more?" in sync mode. Answers with this run's tool results as JSON (earlier runs' come before its input)."""
    last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
    command, messages = request.messages[last_user].text, request.messages[last_user + 1 :]
    calls = [("spawn_subagent", {**_spawn("alpha"), "mode": "sync"})]
    if command == "follow":
        follow_up = {"subagent_id": "/root/alpha", "message": "more?", "mode": "sync"}
        calls = [("list_subagents", {}), ("send_subagent_message", follow_up)]
    made = sum(1 for m in messages if m.role == "assistant")
    if made < len(calls):
        name, arguments = calls[made]
        return {"tool_calls": [{"id": f"k{made}", "name": name, "arguments": arguments}]}
    results = [
        "".join(getattr(part, "text", "") for part in block.content)
        for message in messages
        if message.role == "tool"
        for block in message.content
    ]
    return {"text": json.dumps(results)}


scripted.register("dist-keeping-parent", _keeping_turn)


class DistKeepingAgent(Agent):
    """Keeps its research children in its session: a later run of the session follows alpha up."""

    model = "scripted:dist-keeping-parent"
    subagents = [subagent(DistResearchAgent, kind="research")]
    subagent_long_poll_duration = 30.0
    limits = {"max_turns": 40}


class ProbeTool(Tool):
    """The tools= override's one tool: a child of the overriding kind is offered it and nothing else."""

    tool_name = "probe"
    description = "Probe something."

    def call(self, input):
        return "probed"


def _overriding_child_turn(request):
    """The model= override's answer: the tools its request offers, so a test sees both overrides."""
    return {"text": "override sees " + ",".join(sorted(spec.name for spec in request.tools))}


scripted.register("dist-override-child", _overriding_child_turn)


class DistOverridingAgent(Agent):
    """Spawns alpha in sync mode from a kind whose declaration overrides the child's model and tools."""

    model = "scripted:dist-sync-parent"
    subagents = [subagent(DistResearchAgent, kind="research", model="scripted:dist-override-child", tools=[ProbeTool])]


def _middle_turn(request):
    """A subagent delegating in turn: spawn x synchronously, answer with the spawn's result."""
    if not any(m.role == "tool" for m in request.messages):
        arguments = {"kind": "leaf", "task_name": "x", "task": "dig", "mode": "sync"}
        return {"tool_calls": [{"id": "s1", "name": "spawn_subagent", "arguments": arguments}]}
    return {"text": next(_tool_texts(request))}


scripted.register("dist-middle", _middle_turn)
scripted.register("dist-leaf", lambda request: {"text": "leaf notes"})


class DistLeafAgent(Agent):
    model = "scripted:dist-leaf"
    description = "Digs"


class DistMiddleAgent(Agent):
    model = "scripted:dist-middle"
    description = "Delegates digging"
    subagents = [subagent(DistLeafAgent, kind="leaf")]


class DistNestingAgent(Agent):
    """Spawns alpha, itself a subagent that spawns x: x's path is /root/alpha/x."""

    model = "scripted:dist-sync-parent"
    subagents = [subagent(DistMiddleAgent, kind="research")]


class NoteTool(Tool):
    tool_name = "note"
    description = "Take a note."

    def call(self, input):
        return "noted"


def _interjected_child_turn(request):
    """Take a note first (a slow model call, so an interjection finds the turn running), then answer."""
    if not any(m.role == "tool" for m in request.messages):
        return {"tool_calls": [{"name": "note", "arguments": {}}], "delay": 1.5}
    return {"text": "notes on " + " + ".join(m.text for m in request.messages if m.role == "user")}


def _interjecting_turn(request):
    """Spawn alpha, interject "hurry" until delivered, answer with what the interjection answered."""
    results = list(_tool_texts(request))
    if not results:
        return {"tool_calls": [{"id": "s", "name": "spawn_subagent", "arguments": _spawn("alpha")}]}
    if '"answered"' in results[-1] or '"still_working"' in results[-1]:
        return {"text": results[-1]}
    arguments = {"subagent_id": "/root/alpha", "message": "hurry"}  # spawned, or refused before the turn ran
    return {"tool_calls": [{"id": f"i{len(results)}", "name": "interject_subagent", "arguments": arguments}]}


scripted.register("dist-interjected-child", _interjected_child_turn)
scripted.register("dist-interjecting-parent", _interjecting_turn)


class DistNotingAgent(Agent):
    model = "scripted:dist-interjected-child"
    description = "Investigates, taking notes first"
    tools = [NoteTool]


class DistInterjectingAgent(Agent):
    """Interjects into its child's running turn: on a worker the call parks until the child's model answers."""

    model = "scripted:dist-interjecting-parent"
    subagents = [subagent(DistNotingAgent, kind="research")]
    subagent_long_poll_duration = 30.0
    limits = {"max_turns": 60}
