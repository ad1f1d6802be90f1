"""The agents, tools and checks the provider tests share, whichever adapter a test runs.

The agents name no model: :func:`use_connection` configures a test's connection
and makes its target (``anthropic:claude-sonnet-4-5``) the configuration's
``default_model``, which an agent without a model runs on (the spec's
``config.default_model``). So an adapter's test module and the conformance
suite (``test_http_conformance``, whose ``remote`` connection every adapter
serves in turn) run the same agents, each on its own connection.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lg_core import Agent, Artifact, Tool, ToolError, configure

PNG = b"\x89PNG\r\n\x1a\n"  # a PNG's signature: enough of an image for a request body
LOOKUP_SCHEMA = {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}
TRIAGE = {
    "type": "object",
    "properties": {"category": {"type": "string"}, "urgent": {"type": "boolean"}},
    "required": ["category", "urgent"],
    "additionalProperties": False,
}


class LookupTool(Tool):
    """Answers every topic but ``secrets``, whose call fails: a run sees both kinds of result."""

    description = "Look up a help center entry by topic."
    input_schema = LOOKUP_SCHEMA

    def call(self, input):
        if input["topic"] == "secrets":
            raise ToolError("that topic is not in the help center")
        return f"entry for {input['topic']}"


class ScreenshotTool(Tool):
    """A tool without parameters whose result carries an image."""

    description = "Take a screenshot of the customer's order page."
    input_schema = {"type": "object", "properties": {}}

    def call(self, input):
        return Tool.Result(
            "Screenshot taken.", artifacts=(Artifact(media_type="image/png", data=PNG, name="order.png"),)
        )


class SupportAgent(Agent):
    """Answers on the configured default model (see the module docstring)."""

    system_prompt = "Answer briefly."


class ToolAgent(SupportAgent):
    tools = [LookupTool]


class ScreenshotAgent(SupportAgent):
    tools = [ScreenshotTool]


class TriageAgent(SupportAgent):
    result_schema = TRIAGE


def use_connection(target: str, options: Mapping[str, Any], server: Any = None) -> None:
    """Configure the connection ``target`` names (``connection:model-id``) with ``options`` (an option given
    as None is left out), pointed at ``server``, a local test server on plain HTTP, when one is given; and
    make ``target`` the model of agents that name none."""
    if server is not None:
        options = {"base_url": server.base_url, "allow_insecure_http": True, **options}
    connection = target.split(":", 1)[0]
    configure(
        providers={connection: {name: value for name, value in options.items() if value is not None}},
        default_model=target,
    )


def lookup_call(call_id, topic, split_at=10):
    """A ``lookup`` call as ``(id, name, argument fragments)``: its JSON arguments in two pieces, as streamed."""
    arguments = json.dumps({"topic": topic})
    return (call_id, "lookup", [arguments[:split_at], arguments[split_at:]])


def types(run):
    """The types of a finished run's events, in order."""
    return [event.type for event in run.events()]


def retries(run):
    """A finished run's ``model_retry`` events."""
    return [event for event in run.events() if event.type == "model_retry"]


def retry_reasons(run):
    """Why each model call of a run executed in this process was retried: the error's own text, which
    the run's diagnostics keep for the application and its operators (a ``model_retry`` event carries
    the caller-safe message only)."""
    return [entry["message"] for entry in run.diagnostics if entry["kind"] == "model_retry"]
