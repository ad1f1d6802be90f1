"""Fixtures for code mode: a broker over a few tools, and sessions on the real bwrap."""

from __future__ import annotations

import json
import time

import pytest

from lg_core.code_mode import Broker, Session
from lg_core.errors import ToolError
from lg_core.sandboxes import Bubblewrap
from lg_core.tool import Tool
from lg_core.tool_registry import ToolRegistry

TOOL_SECONDS = 0.6


class HelpCenterLookup(Tool):
    tool_name = "help_center_lookup"
    description = "Find a support answer by topic."
    input_schema = {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": False,
    }

    def call(self, input):
        time.sleep(TOOL_SECONDS)
        entries = {
            "refund policy": "Refunds are available within 30 days.",
            "shipping policy": "Standard shipping takes three to five days.",
        }
        return entries.get(input["query"], "No matching entry.")


class Inventory(Tool):
    tool_name = "inventory-count"
    description = "How many items of a product are in stock, as JSON."
    input_schema = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}

    def call(self, input):
        if input["sku"] == "missing":
            raise ToolError(f"no product {input['sku']!r}")
        if input["sku"] == "broken":
            raise RuntimeError("database password is hunter2")
        return json.dumps({"sku": input["sku"], "count": 3})  # JSON text, decoded for the program


def sandbox_factory(workspace):
    return Bubblewrap(workspace=workspace, policy={"files": {"root": "read_write"}, "network": "none"})


@pytest.fixture
def broker():
    registry = ToolRegistry([HelpCenterLookup(), Inventory()])
    yield Broker(registry)
    registry.close()


@pytest.fixture
def make_session(broker):
    sessions = []

    def make(observation_seconds=10.0, **limits):
        session = Session(broker, sandbox_factory, limits=limits, observation_seconds=observation_seconds)
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.close()
