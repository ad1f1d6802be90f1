"""An application for the at_most_once start tests, imported by the child process whose
attempt of the tool call dies and by the test process that runs the call again.

The charge tool appends its idempotency key to ``$AMO_LOG`` (fsynced) each time its
code runs. ``$AMO_DIE`` names where the child's attempt of the tool step dies, with
``os._exit`` (no cleanup, no unwinding: as abrupt as SIGKILL):

    after_initialize  building the step's agent (a worker has claimed the call; a local
                      run has not yet)
    before_tool       in the before_tool callback: claimed, input validated, not started
    body              inside the tool, after its first line ran
"""

from __future__ import annotations

import os

from lg_core import Agent, Tool, after_initialize, before_tool
from lg_core.providers import scripted

DIED = 37  # the child's exit status when it died where $AMO_DIE says
TOOL_STEP = "root/turn-0/tool/c"

scripted.register(
    "at-most-once-start",
    [{"tool_calls": [{"name": "charge", "id": "c", "arguments": {"amount": 5}}]}, {"text": "Charged."}],
)


def _die_at(point: str) -> None:
    if os.environ.get("AMO_DIE") == point:
        os._exit(DIED)


def calls() -> list[str]:
    """The idempotency keys of the charge tool's calls, in every process, in order."""
    with open(os.environ["AMO_LOG"]) as handle:
        return handle.read().split()


class ChargeTool(Tool):
    tool_name = "charge"
    description = "Charge the card; never twice."
    input_schema = {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}
    at_most_once = True

    def call(self, input):
        with open(os.environ["AMO_LOG"], "a") as handle:
            handle.write(self.idempotency_key + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        _die_at("body")
        return f"charged {input['amount']}"


class ChargeAgent(Agent):
    model = "scripted:at-most-once-start"
    tools = [ChargeTool]

    @after_initialize
    def die_building_the_tool_step(self, agent, **kwargs):
        context = kwargs.get("context")
        if context is not None and "/tool/" in str(context.metadata.get("step", "")):
            _die_at("after_initialize")

    @before_tool
    def die_before_the_tool(self, payload, **kwargs):
        _die_at("before_tool")
