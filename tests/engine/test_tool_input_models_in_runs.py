"""A tool whose input is a Pydantic model, in real runs: its validators are part of validation.

The spec: "Validation and application ToolError failures become error results",
unexpected failures become sanitized error results, and ``before_tool`` "runs
after validation but before a tool call starts". A model's validators are the
last step of that validation, so what they raise must reach the model as a tool
result (never fail the run), and ``before_tool`` must not see input they refuse.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel, field_validator

from lg_core import Agent, Tool, ToolError, after_tool, before_tool
from lg_core.tool import PreparedInput, ToolOutcome

CALLS: list[str] = []


class OrderInput(BaseModel):
    order_number: str

    @field_validator("order_number")
    @classmethod
    def known(cls, value: str) -> str:
        if value == "404":
            raise ToolError("No such order.")
        if value == "500":
            raise RuntimeError("orders DB at 10.0.0.5 refused login for svc_orders")
        if value == "":
            raise ValueError("an order number is required")
        return value


class OrderStatusTool(Tool):
    description = "Look up an order's status."
    input_schema = OrderInput

    def call(self, input: OrderInput) -> str:
        CALLS.append(input.order_number)
        return f"order {input.order_number} shipped"


class OrderAgent(Agent):
    tools = [OrderStatusTool]
    seen: list[str] = []

    @before_tool
    def audit(self, payload):
        type(self).seen.append(f"before {payload['tool_use'].input['order_number']}")

    @after_tool
    def audited(self, payload):
        type(self).seen.append(f"after {payload['result'].status}")


@pytest.fixture(autouse=True)
def _fresh_records():
    CALLS.clear()
    OrderAgent.seen = []


def ask_for(script, order_number: str):
    target = script(
        [
            {"tool_calls": [{"name": "order_status", "arguments": {"order_number": order_number}}]},
            {"text": "answered"},
        ]
    )
    agent: type[OrderAgent] = type("OrderAgentRun", (OrderAgent,), {"model": target})
    return agent.ask("Where is my order?")


def tool_result_text(run) -> str:
    (result,) = run.result.messages[2].tool_results
    return "".join(block.text for block in result.content)


def test_a_tool_error_raised_by_a_validator_reaches_the_model_and_the_run_completes(config, script):
    run = ask_for(script, "404")

    assert run.completed, run.error
    assert tool_result_text(run) == "No such order."
    assert CALLS == []
    assert OrderAgent.seen == []  # refused by validation: neither callback ran


def test_an_unexpected_error_raised_by_a_validator_is_sanitized_for_the_model_and_kept(config, script):
    run = ask_for(script, "500")

    assert run.completed, run.error
    text = tool_result_text(run)
    assert text == "Tool 'order_status' failed with an internal error (RuntimeError)."
    assert "10.0.0.5" not in text
    assert [str(error) for error in run.tool_errors] == ["orders DB at 10.0.0.5 refused login for svc_orders"]
    assert CALLS == []


def test_before_tool_does_not_see_input_the_model_refuses(config, script):
    run = ask_for(script, "")

    assert run.completed, run.error
    assert tool_result_text(run).startswith("Invalid input for tool 'order_status': ")
    assert "an order number is required" in tool_result_text(run)
    assert OrderAgent.seen == []
    assert CALLS == []


def test_valid_input_runs_before_tool_then_the_call_then_after_tool(config, script):
    run = ask_for(script, "481")

    assert run.completed, run.error
    assert tool_result_text(run) == "order 481 shipped"
    assert OrderAgent.seen == ["before 481", "after success"]
    assert CALLS == ["481"]


@pytest.mark.parametrize(
    ("order_number", "kind", "text"),
    [
        ("404", "tool_error", "No such order."),
        ("500", "unexpected", "Tool 'order_status' failed with an internal error (RuntimeError)."),
    ],
)
def test_execute_called_directly_returns_the_validators_failure(order_number, kind, text):
    outcome = OrderStatusTool().execute({"order_number": order_number})

    assert (outcome.status, outcome.error_kind, outcome.text) == ("error", kind, text)
    assert outcome.error is not None


def test_prepare_gives_the_converted_input_or_the_failure():
    tool = OrderStatusTool()

    prepared = tool.prepare({"order_number": "481"})
    assert isinstance(prepared, PreparedInput) and prepared.value == OrderInput(order_number="481")
    assert tool.execute_prepared(prepared).text == "order 481 shipped"
    assert isinstance(tool.prepare({"order_number": ""}), ToolOutcome)
