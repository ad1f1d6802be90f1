"""Tools for engine tests that only need some tool call to run and commit: one echoes a number, one does nothing;
and a publisher that records what the scheduler's sweeps would send."""

from __future__ import annotations

from lg_core import Tool


class NumberedTool(Tool):
    tool_name = "numbered"
    description = "Echo a number."
    input_schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }

    def call(self, input):
        return f"number {input['n']}"


class NoopTool(Tool):
    tool_name = "noop"
    description = "Do nothing."
    input_schema = {"type": "object"}

    def call(self, input):
        return "ok"


def numbered_calls(*numbers: int) -> list[dict]:
    """A scripted model's turns: one numbered call per turn, then a final text."""
    return [*({"tool_calls": [{"name": "numbered", "arguments": {"n": n}}]} for n in numbers), {"text": "done"}]


class RecordingPublisher:
    """What lg_scheduler.recovery's sweeps publish (steps) and advance (run ids), kept in ``sent``."""

    def __init__(self):
        self.sent = []

    def publish(self, refs):
        self.sent.extend(refs)

    def advance(self, run_id):
        self.sent.append(run_id)
