"""Agents for the batch tests; imported as ``tests.batch.batch_app`` here and by ``lg batch`` child processes.

``ItemAgent`` calls the ``log_item`` tool once per run and then answers, so
the tool log ($BATCH_APP_LOG, one JSON line per call) shows how often each
item's run executed its side effect. ``BATCH_APP_DELAY`` (seconds, read at
call time) slows each model turn so a test can kill a batch mid-way. A
message containing "explode" makes the model fail, for failed-outcome items.
``metadata.connection`` picks the provider connection (``scripted`` or a
configured ``other``). ``BATCH_APP_MODEL_LOG`` (a path) records the time of
every model call, for rate limits.
"""

from __future__ import annotations

import json
import os
import time

from lg_core import Agent, Tool
from lg_core.providers import scripted


class LogItemTool(Tool):
    tool_name = "log_item"
    description = "Record that an item was processed."
    input_schema = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}

    def call(self, input):
        path = os.environ.get("BATCH_APP_LOG")
        if path:
            with open(path, "a") as handle:
                handle.write(json.dumps({"item": input["item"], "key": self.idempotency_key}) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        return "recorded"


def _turn(request):
    text = next(m.text for m in request.messages if m.role == "user")
    delay = float(os.environ.get("BATCH_APP_DELAY", "0"))
    _log_model_call(request)
    if "explode" in text:
        return {"error": {"message": "the provider exploded", "kind": "provider"}}
    if request.metadata["sequence"] == 0:
        return {"tool_calls": [{"name": "log_item", "arguments": {"item": text}}], "delay": delay}
    return {"text": f"done: {text}", "delay": delay}


def _log_model_call(request):
    """One JSON line per model call in $BATCH_APP_MODEL_LOG: when it reached the provider, in which process."""
    path = os.environ.get("BATCH_APP_MODEL_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(
                json.dumps({"at": time.time(), "pid": os.getpid(), "run_id": request.metadata["run_id"]}) + "\n"
            )


def logged_model_calls(path) -> list[dict]:
    """The model calls in ``path`` (``at``, ``pid``, ``run_id``), in time order."""
    with open(path) as handle:
        return sorted((json.loads(line) for line in handle if line.strip()), key=lambda call: call["at"])


scripted.register("batch-items", _turn)


class ItemAgent(Agent):
    model = "scripted:batch-items"
    tools = [LogItemTool]

    @classmethod
    def select_model(cls, invocation):
        connection = invocation.metadata.get("connection", "scripted")
        return f"{connection}:batch-items"


class PlainTool(Tool):
    description = "Not an agent."

    def call(self, input):
        return "no"


def logged_items(path) -> list[str]:
    """The item of every tool call in the log, in call order."""
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line)["item"] for line in handle if line.strip()]
