"""The agents the web app example serves by default.

Workers import this module (``lg stack up --import examples.web_agents``), and
so does the web app (through ``LG_WEB_AGENTS``). The model is the offline
``scripted`` provider, so the example runs without an API key; point
``model`` at a real provider (e.g. ``"openrouter:openai/gpt-5.6-luna"``) for
real answers.
"""

from __future__ import annotations

from lg_core import Agent, Tool
from lg_core.providers import scripted

HELP_CENTER = {
    "refunds": "Refunds are available within 30 days of purchase.",
    "shipping": "Orders ship within two business days.",
}


class HelpCenterLookupTool(Tool):
    description = "Look up a help center entry by topic."
    input_schema = {
        "type": "object",
        "properties": {"topic": {"type": "string", "enum": sorted(HELP_CENTER)}},
        "required": ["topic"],
        "additionalProperties": False,
    }

    def call(self, input):
        return HELP_CENTER[input["topic"]]


def _support_turn(request) -> dict:
    """Look the topic up, then answer from the help center (noting any interjection)."""
    question = next(m.text for m in request.messages if m.role == "user" and m.text)
    topic = "shipping" if "ship" in question.lower() else "refunds"
    if int(request.metadata.get("sequence", 0)) == 0:
        return {"tool_calls": [{"name": "help_center_lookup", "arguments": {"topic": topic}}]}
    last = request.messages[-1]
    added = last.role == "user" and last.text and last.text != question
    return {"text": HELP_CENTER[topic] + (f" (You added: {last.text})" if added else "")}


scripted.register("web-support", _support_turn)


class SupportAgent(Agent):
    model = "scripted:web-support"
    system_prompt = "Check the help center before stating company guidance."
    tools = [HelpCenterLookupTool]
