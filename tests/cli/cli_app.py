"""Agents for the CLI tests, imported by ``lg`` as ``cli_app`` (tests/cli is on sys.path).

The scripted models are registered on import, like an application module
named with ``--import``. ``ElsewhereAgent``'s model is registered by
:mod:`cli_models` instead, to show why ``--import`` / ``LG_IMPORTS`` exist.
"""

from __future__ import annotations

import os

from lg_core import Agent, Graph, Tool, edge
from lg_core.providers import scripted

scripted.register("cli-echo", [{"text": "Hello from the echo agent."}])
scripted.register(
    "cli-lookup",
    [
        {
            "text": "Checking. ",
            "tool_calls": [{"name": "faq_lookup", "arguments": {"topic": "hours"}}],
        },
        {"text": "We are open 9 to 5."},
    ],
)
scripted.register("cli-broken", [{"error": {"message": "the scripted provider is down", "kind": "provider"}}])

# Slow only where CLI_SLOW_DELAY is set (a child process the test kills), instant elsewhere.
scripted.register(
    "cli-slow",
    lambda request: {
        "text": "Done at last.",
        "delay": float(os.environ.get("CLI_SLOW_DELAY", "0")),
    },
)

NOT_AN_AGENT = "just a string"


class FaqLookupTool(Tool):
    description = "Look up an FAQ entry."
    input_schema = {
        "type": "object",
        "properties": {"topic": {"type": "string"}},
        "required": ["topic"],
    }

    def call(self, input):
        return {"hours": "Open 9:00-17:00, Monday to Friday."}.get(input["topic"], "No entry.")


class EchoAgent(Agent):
    model = "scripted:cli-echo"


class LookupAgent(Agent):
    model = "scripted:cli-lookup"
    tools = [FaqLookupTool]


class BrokenAgent(Agent):
    model = "scripted:cli-broken"


class SlowAgent(Agent):
    model = "scripted:cli-slow"


class ElsewhereAgent(Agent):
    model = "scripted:cli-elsewhere"


scripted.register("cli-triage", [{"text": "billing"}])
scripted.register("cli-billing", [{"text": "A duplicate charge: refunded."}])


class CliTriageAgent(Agent):
    model = "scripted:cli-triage"


class CliBillingAgent(Agent):
    model = "scripted:cli-billing"


class RoutingGraph(Graph):
    """Triage, then billing: what ``lg ask`` and ``lg runs show`` print for an assembly run."""

    nodes = {"triage": CliTriageAgent, "billing": CliBillingAgent}
    start = "triage"
    edges = [edge("triage", "billing")]
    finish = "billing"
