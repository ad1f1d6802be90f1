"""Two offline agents: one that looks up a help entry, one whose tool takes long enough to be killed mid-call."""

from __future__ import annotations

import time
from typing import Any

from lg_core import Agent, Tool
from lg_core.providers import scripted


class HelpCenterLookupTool(Tool):
    description = "Look up a help center entry by topic."
    input_schema = {
        "type": "object",
        "properties": {"topic": {"type": "string"}},
        "required": ["topic"],
        "additionalProperties": False,
    }

    def call(self, input: dict[str, Any]) -> str:
        return {"refunds": "Refunds are available within 30 days."}.get(input["topic"], "No entry.")


class SlowLookupTool(Tool):
    description = "A lookup that takes a few seconds, so a worker can be killed in the middle of it."
    input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    def call(self, input: dict[str, Any]) -> str:
        time.sleep(4)
        return f"entry {input['n']}"


scripted.register(
    "smoke-support",
    [
        {"tool_calls": [{"name": "help_center_lookup", "arguments": {"topic": "refunds"}}]},
        {"text": "Refunds are available within 30 days."},
    ],
)
scripted.register(
    "smoke-slow",
    [
        {"tool_calls": [{"name": "slow_lookup", "arguments": {"n": 1}}]},
        {"tool_calls": [{"name": "slow_lookup", "arguments": {"n": 2}}]},
        {"text": "Both entries read."},
    ],
)


class SupportAgent(Agent):
    model = "scripted:smoke-support"
    system_prompt = "Check the help center before stating company guidance."
    tools = [HelpCenterLookupTool]


class SlowAgent(Agent):
    model = "scripted:smoke-slow"
    tools = [SlowLookupTool]
