"""Agents, tools and scripted models for the replay tests.

Module level, so a stored run's entrypoint can be imported again when it is
retried or forked. Tools append ``(tool, n, idempotency key)`` to ``CALLS``
so a test can prove which calls ran and how often.
"""

from __future__ import annotations

import time

from lg_core import Agent, Tool, before_tool

CALLS: list[tuple[str, int, str]] = []
STEP_TOOLS = 3
STOP_ONCE: set[str] = set()  # tool names that cancel their run the first time they are called
STOP_BEFORE: set[str] = set()  # tool names whose before_tool cancels the run the first time (the tool never starts)


class StepTool(Tool):
    tool_name = "step"
    description = "Record one numbered step."
    input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    def call(self, input):
        CALLS.append((self.tool_name, input["n"], self.idempotency_key))
        self._maybe_stop()
        return f"step {input['n']} done"

    def _maybe_stop(self) -> None:
        """An operator cancels the run while this call runs (the first time only)."""
        if self.tool_name in STOP_ONCE:
            STOP_ONCE.discard(self.tool_name)
            self.run.cancel("an operator stopped the run")
            self.run.cancellation_token.raise_if_cancelled()


class ChargeTool(StepTool):
    tool_name = "charge"
    description = "Charge the card; must never run twice."
    at_most_once = True


class LateTool(StepTool):
    """Waits until the call named in ``after`` (same turn) has committed, then records its step."""

    tool_name = "late"
    description = "Record a step after another call of the turn has finished."
    input_schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "after": {"type": "string"}},
        "required": ["n", "after"],
    }

    def call(self, input):
        key = f"root/turn-0/tool/{input['after']}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            step = self.runtime.store.load_step(self.run.id, key)
            if step is not None and step.status == "succeeded":
                break
            time.sleep(0.01)
        return super().call(input)


class ReplayAgent(Agent):
    tools = [StepTool, ChargeTool, LateTool]

    @before_tool
    def stop_before(self, payload, **kwargs):
        """An operator cancels the run after the call was claimed, before its tool starts."""
        name = payload["tool_use"].name
        if name in STOP_BEFORE:
            STOP_BEFORE.discard(name)
            self.run.cancel("an operator stopped the run")
            self.run.cancellation_token.raise_if_cancelled()

    @classmethod
    def select_model(cls, invocation):
        return invocation["target"]


class Outage:
    """A scripted model: ``STEP_TOOLS`` turns of one step call each, then an answer,
    except that the answer turn fails while ``down`` (a provider outage)."""

    def __init__(self, tool: str = "step") -> None:
        self.down = True
        self.tool = tool
        self.requests = 0

    def __call__(self, request):
        self.requests += 1
        sequence = request.metadata["sequence"]
        if sequence < STEP_TOOLS:
            return {"tool_calls": [{"name": self.tool, "arguments": {"n": sequence}}]}
        if self.down:
            return {"error": {"kind": "http", "status": 503, "message": "the provider is down"}}
        return {"text": "All steps recorded."}


def step_calls(tool: str = "step") -> list[int]:
    return sorted(n for name, n, _key in CALLS if name == tool)
