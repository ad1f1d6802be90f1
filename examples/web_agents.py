"""The agents the web app example serves by default.

Workers import this module (``lg stack up --import examples.web_agents``), and
so does the web app (through ``LG_WEB_AGENTS``). The model is the offline
``scripted`` provider, so the example runs without an API key; point
``model`` at a real provider (e.g. ``"openrouter:openai/gpt-5.6-luna"``) for
real answers.
"""

from __future__ import annotations

import re
import time

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


# How long an order lookup takes. The help center answers at once, so a run about it ends
# before a second curl can interject or cancel; a question naming an order ("Where is order
# 481?") waits on this slow back-end long enough to try both by hand.
ORDER_LOOKUP_SECONDS = 10.0


class OrderStatusTool(Tool):
    description = "Look up the shipping status of an order (a slow back-end)."
    input_schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string", "pattern": "^[0-9]{1,12}$"}},
        "required": ["order_id"],
        "additionalProperties": False,
    }

    def call(self, input):
        # A long-running tool checks for cancellation while it waits, so a cancel stops it now.
        deadline = time.monotonic() + ORDER_LOOKUP_SECONDS
        while time.monotonic() < deadline:
            self.context.check()
            time.sleep(0.1)
        return f"Order {input['order_id']} shipped yesterday."


def _support_turn(request) -> dict:
    """Look the order or topic up, then answer from what it said (noting any interjection)."""
    question = next(m.text for m in request.messages if m.role == "user" and m.text)
    order = re.search(r"order\D{0,3}(\d{1,12})", question, re.IGNORECASE)
    topic = "shipping" if "ship" in question.lower() else "refunds"
    if int(request.metadata.get("sequence", 0)) == 0:
        if order:
            return {"tool_calls": [{"name": "order_status", "arguments": {"order_id": order.group(1)}}]}
        return {"tool_calls": [{"name": "help_center_lookup", "arguments": {"topic": topic}}]}
    last = request.messages[-1]
    added = last.role == "user" and last.text and last.text != question
    answer = f"Order {order.group(1)} shipped yesterday." if order else HELP_CENTER[topic]
    return {"text": answer + (f" (You added: {last.text})" if added else "")}


scripted.register("web-support", _support_turn)


class SupportAgent(Agent):
    model = "scripted:web-support"
    system_prompt = "Check the help center before stating company guidance."
    tools = [HelpCenterLookupTool, OrderStatusTool]
