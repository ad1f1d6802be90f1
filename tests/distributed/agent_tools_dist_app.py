"""An Agent calling an Agent and a Graph as tools, for the distributed tests.

Workers import it by the coordinator's path when they first meet one of its runs.
The coordinator's first turn calls both tools at once: ``classify_sentiment`` (an
Agent that records side effect 11 through graph_dist_app's ``effect`` tool, then
answers) and ``investigate`` (graph_dist_app's TransferGraph, whose nodes record
effects 1 to 4). Its second turn answers from what the tools returned. ``RecallingCoordinatorAgent``
calls its ``note`` tool (``preserve_context``) twice in one turn: the calls run one
after the other, and the second one's delegate sees the first one's conversation.
"""

from __future__ import annotations

import dist_app
import graph_dist_app
from graph_dist_app import EffectTool

from lg_core import Agent, after_tool, agent_as_tool, assembly_as_tool, before_tool
from lg_core.providers import scripted

SENTIMENT = "negative"
ANSWER = "The customer is upset; transfer 481 settles within two business days."


def _sentiment_model(request):
    if request.messages[-1].role == "tool":
        return {"text": SENTIMENT}
    return {"tool_calls": [{"name": "effect", "arguments": {"n": 11}}]}


def _coordinator_model(request):
    if any(message.role == "tool" for message in request.messages):
        return {"text": ANSWER}
    return {
        "tool_calls": [
            {"id": "sentiment", "name": "classify_sentiment", "arguments": {"message": "I was charged twice!"}},
            {"id": "investigate", "name": "investigate", "arguments": {"message": "Why is transfer 481 pending?"}},
        ]
    }


scripted.register("tools-sentiment", _sentiment_model)
scripted.register("tools-coordinator", _coordinator_model)


class ToolSentimentAgent(Agent):
    model = "scripted:tools-sentiment"
    description = "Classifies the customer's sentiment"
    tools = [EffectTool]


class CoordinatorAgent(Agent):
    model = "scripted:tools-coordinator"

    @before_tool
    def admit(self, payload, **kwargs):
        """Logs each admission (``admit 0 <call id>``): a step woken after parking admits nothing again."""
        dist_app._log("admit", 0, payload["tool_use"].id)

    @after_tool
    def answered(self, payload, **kwargs):
        dist_app._log("answered", 0, payload["tool_use"].id)

    tools = [
        agent_as_tool(ToolSentimentAgent, name="classify_sentiment"),
        assembly_as_tool(
            graph_dist_app.TransferGraph, name="investigate", description="Investigates a pending transfer"
        ),
    ]


def _note_model(request):
    asked = [message.text for message in request.messages if message.role == "user"]
    return {"text": " | ".join(asked)}


def _recalling_model(request):
    if any(message.role == "tool" for message in request.messages):
        return {"text": "noted"}
    return {
        "tool_calls": [
            {"id": "first", "name": "note", "arguments": {"message": "transfer 481"}},
            {"id": "second", "name": "note", "arguments": {"message": "still pending"}},
        ]
    }


scripted.register("tools-note", _note_model)
scripted.register("tools-recalling", _recalling_model)


class NoteAgent(Agent):
    model = "scripted:tools-note"
    description = "Notes what it is told, and repeats everything it was told so far"


class RecallingCoordinatorAgent(Agent):
    model = "scripted:tools-recalling"
    tools = [agent_as_tool(NoteAgent, name="note", preserve_context=True)]
