"""A Pydantic result model's own validators check a structured result, as its JSON Schema does.

An answer the model's ``field_validator`` or ``model_validator`` rejects gets one
repair, told the validator's message; a second rejected answer fails the run
with StructuredResultError. An accepted answer's output is the model instance,
while the stored StructuredResult keeps the JSON value, so a run rebuilt from
the store gives the same output. Dict schemas are checked by JSON Schema alone.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

import lg_core
from lg_core import Agent
from lg_core.errors import StructuredResultError
from lg_core.result_schema import ResultSchema
from tests.support.recording import recording


class Refund(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount: int
    currency: str

    @field_validator("amount")
    @classmethod
    def positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("amount must be positive")
        return value

    @field_validator("currency")
    @classmethod
    def upper_case(cls, value: str) -> str:
        return value.upper()


class Window(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: int
    end: int

    @model_validator(mode="after")
    def ordered(self) -> Window:
        if self.end < self.start:
            raise ValueError("end must not come before start")
        return self


class RefundAgent(Agent):
    """Module level, so a stored run's entrypoint can be imported again by get_run."""

    result_schema = Refund

    @classmethod
    def select_model(cls, invocation):
        return invocation["target"]


NEGATIVE = {"amount": -5, "currency": "eur"}
VALID = {"amount": 5, "currency": "eur"}
NATIVE = {"native_structured_output": True}
NO_NATIVE = {"native_structured_output": False}
COUNT = {
    "name": "count",
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 0}},
    "required": ["count"],
    "additionalProperties": False,
}


def agent_for(target, schema):
    return type("ValidatedAgent", (Agent,), {"model": target, "result_schema": schema})


def repairs(run):
    return [event for event in run.events() if event.type == "structured_result_repair"]


# -- a rejecting validator is repaired once, then fails ---------------------------------------------


def test_a_field_validator_rejection_is_repaired_with_the_validators_message(config, script):
    target, requests = recording(script, [{"structured": NEGATIVE}, {"structured": VALID}], capabilities=NATIVE)
    run = agent_for(target, Refund).ask("Refund?")

    assert run.outcome == "completed"
    assert isinstance(run.result.output, Refund)
    assert run.result.output.amount == 5
    [repair] = repairs(run)
    assert repair.data["validation_errors"] == ["amount: amount must be positive"]
    assert len(requests) == 2
    assert "amount: amount must be positive" in requests[1].messages[-1].text


def test_a_field_validator_rejection_through_the_submit_tool_is_repaired(config, script):
    submit = "submit_refund"
    turns = [
        {"tool_calls": [{"name": submit, "arguments": NEGATIVE}]},
        {"tool_calls": [{"name": submit, "arguments": VALID}]},
    ]
    target, requests = recording(script, turns, capabilities=NO_NATIVE)
    run = agent_for(target, Refund).ask("Refund?")

    assert run.outcome == "completed"
    assert run.result.output == Refund(amount=5, currency="EUR")
    [tool_message] = [m for m in requests[1].messages if m.role == "tool"]
    [result] = tool_message.content
    assert result.status == "error"
    assert "amount must be positive" in result.content[0].text


def test_a_model_validator_rejection_is_repaired(config, script):
    turns = [{"structured": {"start": 9, "end": 3}}, {"structured": {"start": 3, "end": 9}}]
    run = agent_for(script(turns, capabilities=NATIVE), Window).ask("When?")

    assert run.outcome == "completed"
    assert run.result.output == Window(start=3, end=9)
    [repair] = repairs(run)
    assert repair.data["validation_errors"] == ["(root): end must not come before start"]


def test_a_validator_rejecting_twice_fails_with_structured_result_error(config, script):
    turns = [{"structured": NEGATIVE}, {"structured": {"amount": 0, "currency": "eur"}}]
    run = agent_for(script(turns, capabilities=NATIVE), Refund).ask("Refund?")

    assert run.outcome == "failed"
    assert isinstance(run.error, StructuredResultError)
    assert run.error.schema_name == "refund"
    assert run.error.validation_errors == ("amount: amount must be positive",)
    assert run.result is None
    assert len(repairs(run)) == 1


# -- an accepted result --------------------------------------------------------------------------------


def test_a_valid_result_is_the_model_instance_and_stored_as_json(config, script):
    run = agent_for(script([{"structured": VALID}], capabilities=NATIVE), Refund).ask("Refund?")

    assert run.outcome == "completed"
    output = run.result.output
    assert isinstance(output, Refund)
    assert (output.amount, output.currency) == (5, "EUR")
    assert run.result.structured_result.value == VALID  # the answer as sent: JSON, not the instance
    assert json.loads(json.dumps(run.result.structured_result.value)) == VALID
    assert not repairs(run)


def test_a_run_rebuilt_from_the_store_gives_the_same_model_instance(file_config, script):
    run = RefundAgent.ask("Refund?", target=script([{"structured": VALID}], capabilities=NATIVE))

    stored = lg_core.get_run(run.id)

    assert isinstance(stored.result.output, Refund)
    assert stored.result.output == run.result.output == Refund(amount=5, currency="EUR")
    assert stored.result.structured_result == run.result.structured_result


# -- ResultSchema.validate messages ------------------------------------------------------------------


def test_a_wrong_type_is_reported_once_in_the_json_schema_words():
    spec = ResultSchema.build(Refund, "RefundAgent")

    assert spec.validate({"amount": "lots", "currency": "eur"}) == ["amount: 'lots' is not of type 'integer'"]
    assert spec.validate({"amount": -1, "currency": "eur"}) == ["amount: amount must be positive"]
    assert spec.validate({"currency": "eur", "note": "x"}) == [
        "(root): 'amount' is a required property",
        "(root): Additional properties are not allowed ('note' was unexpected)",
    ]
    assert spec.validate(VALID) == []


# -- dict schemas are unchanged --------------------------------------------------------------------


def test_a_dict_schema_is_checked_by_json_schema_and_its_output_is_the_value(config, script):
    spec = ResultSchema.build(COUNT, "CountAgent")
    assert spec.validate({"count": -1}) == ["count: -1 is less than the minimum of 0"]
    assert spec.output({"count": 2}) == {"count": 2}

    turns = [{"structured": {"count": -1}}, {"structured": {"count": 2}}]
    run = agent_for(script(turns, capabilities=NATIVE), COUNT).ask("How many?")

    assert run.outcome == "completed"
    assert run.result.output == {"count": 2}
    assert run.result.structured_result.value == {"count": 2}
    [repair] = repairs(run)
    assert repair.data["validation_errors"] == ["count: -1 is less than the minimum of 0"]
