"""The demo's support agents: a help-center tool and two scripted conversations.

Everything here is offline and deterministic: the models are ``scripted``
models registered when this module is imported, so any process that imports
it (the demo, the crash child, ``lg runs resume``) can continue a run.

Every lookup appends one line to a journal file (path from the run context's
``journal`` key), which is how the demo proves that committed tool calls are
not executed again after a crash. :func:`arm_crash` makes this process
SIGKILL itself inside one lookup: the demo's child process uses it.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from lg_core import Agent, Tool, ToolError
from lg_core.providers import scripted

HELP_CENTER: dict[str, str] = {
    "refunds": "Refunds: full refund within 30 days of delivery; after that, store credit only.",
    "warranty": "Warranty: appliances carry a 2-year warranty covering defects; a receipt is required.",
    "repairs": "Repairs: warranty repairs are free; book one at example.com/repairs, about 5 business days.",
    "shipping": "Shipping: orders ship in 1-2 business days; tracking links arrive by email.",
}

QUICK_MODEL = "support-demo"
DURABLE_MODEL = "support-durable-demo"

_QUICK_TURNS: list[dict[str, Any]] = [
    {
        "text": "Let me check the help center. ",
        "tool_calls": [{"name": "help_center_lookup", "arguments": {"topic": "refunds"}}],
    },
    {"text": "You can get a full refund within 30 days of delivery. After 30 days we can offer store credit instead."},
]

DURABLE_TOPICS = ("refunds", "warranty", "repairs")
_DURABLE_TURNS: list[dict[str, Any]] = [
    *({"tool_calls": [{"name": "help_center_lookup", "arguments": {"topic": topic}}]} for topic in DURABLE_TOPICS),
    {
        "text": (
            "Your blender is past the 30-day refund window, but it is covered by the 2-year warranty: "
            "book a free repair at example.com/repairs and bring your receipt. It takes about 5 business days."
        )
    },
]

scripted.register(QUICK_MODEL, _QUICK_TURNS)
scripted.register(DURABLE_MODEL, _DURABLE_TURNS)

_crash_topic: str | None = None


def arm_crash(topic: str) -> None:
    """Make this process SIGKILL itself while looking up ``topic`` (demo child only)."""
    global _crash_topic
    _crash_topic = topic


class HelpCenterLookupTool(Tool):
    description = "Look up a help center entry by topic."
    input_schema = {
        "type": "object",
        "properties": {"topic": {"type": "string", "enum": sorted(HELP_CENTER)}},
        "required": ["topic"],
        "additionalProperties": False,
    }

    def call(self, input: dict[str, Any]) -> str:
        topic = input["topic"]
        journal = self.context.state.get("journal") if self.context is not None else None
        if journal:
            with open(journal, "a", encoding="utf-8") as handle:
                handle.write(f"{topic}\t{os.getpid()}\n")
        if topic == _crash_topic:
            os.kill(os.getpid(), signal.SIGKILL)
        if topic not in HELP_CENTER:
            raise ToolError(f"no help center entry for {topic!r}")
        return HELP_CENTER[topic]


class SupportAgent(Agent):
    """Answers a refund question from the help center."""

    model = f"scripted:{QUICK_MODEL}"
    system_prompt = "You are a support agent. Check the help center before stating company policy."
    tools = [HelpCenterLookupTool]


class DurableSupportAgent(SupportAgent):
    """Looks up three help center entries, one per turn, then answers."""

    model = f"scripted:{DURABLE_MODEL}"


def read_journal(path: str) -> list[tuple[str, int]]:
    """The lookups recorded in ``path``: (topic, pid) in execution order."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [line.rstrip("\n").split("\t") for line in handle if line.strip()]
    except FileNotFoundError:
        return []
    return [(topic, int(pid)) for topic, pid in lines]


__all__ = [
    "DURABLE_TOPICS",
    "DurableSupportAgent",
    "HELP_CENTER",
    "HelpCenterLookupTool",
    "SupportAgent",
    "arm_crash",
    "read_journal",
]
