"""Structured results through a run: provider and tool strategies, repair, failures."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ConfigDict

import lg_core
from lg_core import Agent, StructuredResult
from lg_core.errors import ConfigurationError, StructuredResultError
from tests.support.recording import recording

TRIAGE = {
    "name": "support_triage",
    "description": "Routing decision for one support request",
    "type": "object",
    "properties": {
        "category": {"type": "string", "enum": ["billing", "delivery", "returns", "other"]},
        "urgent": {"type": "boolean"},
    },
    "required": ["category", "urgent"],
    "additionalProperties": False,
}
VALID = {"category": "delivery", "urgent": True}
NO_NATIVE = {"native_structured_output": False}


def triage_agent(target, schema=None):
    return type("TriageAgent", (Agent,), {"model": target, "result_schema": schema or TRIAGE})


def event_types(run):
    return [event.type for event in run.events()]


# -- provider strategy ----------------------------------------------------------------------


def test_provider_strategy_valid_json_becomes_the_output(config, script):
    target, requests = recording(script, [{"structured": VALID}])
    run = triage_agent(target).ask("My package is missing.")

    assert run.outcome == "completed"
    assert run.result.output == VALID
    assert run.result.structured
    assert run.result.structured_result == StructuredResult(schema_name="support_triage", value=VALID)
    assert json.loads(run.response) == VALID
    [request] = requests
    assert request.output_schema["name"] == "support_triage"
    assert request.output_schema["schema"]["required"] == ["category", "urgent"]
    assert "structured_result_repair" not in event_types(run)


def test_the_run_context_reads_its_structured_result_like_its_usage(config, script):
    """RunContext#structured_result, like RunContext#usage, is a zero-argument reader: a
    property here, as usage is and RunResult.structured_result is. As a method,
    ``context.structured_result`` was a bound method, truthy whether or not a result
    had been submitted."""
    seen = []

    class WatchingAgent(Agent):
        model = script([{"structured": VALID}])
        result_schema = TRIAGE

        @lg_core.before_model
        def before(self, payload, context):
            seen.append(context.structured_result)

        @lg_core.after_invocation
        def after(self, payload, context):
            seen.append(context.structured_result)

    run = WatchingAgent.ask("My package is missing.")

    assert run.outcome == "completed"
    assert seen == [None, run.result.structured_result]
    context = lg_core.RunContext()
    assert context.submit_structured_result(run.result.structured_result) is run.result.structured_result
    assert context.structured_result is run.result.structured_result


def test_plain_agent_output_is_the_text(config, script):
    target = script([{"text": "Just text."}])
    run = type("PlainAgent", (Agent,), {"model": target}).ask("Hi")

    assert run.result.output == "Just text."
    assert run.result.structured_result is None


def test_invalid_then_valid_result_is_repaired_once(config, script):
    target, requests = recording(
        script, [{"structured": {"category": "teleport", "urgent": "yes"}}, {"structured": VALID}]
    )
    run = triage_agent(target).ask("Where is my parcel?")

    assert run.outcome == "completed"
    assert run.result.output == VALID
    assert len(requests) == 2
    [repair] = [e for e in run.events() if e.type == "structured_result_repair"]
    assert repair.data["schema_name"] == "support_triage"
    assert any("category" in problem for problem in repair.data["validation_errors"])
    repair_prompt = requests[1].messages[-1]
    assert repair_prompt.role == "user"
    assert "support_triage" in repair_prompt.text
    assert [m.role for m in run.result.messages] == ["user", "assistant", "user", "assistant"]


def test_non_json_answer_is_repaired(config, script):
    target = script(
        [
            {"text": "It is a delivery problem, quite urgent."},
            {"text": "```json\n" + json.dumps(VALID) + "\n```"},
        ]
    )
    run = triage_agent(target).ask("Where is my parcel?")

    assert run.outcome == "completed"
    assert run.result.output == VALID
    [repair] = [e for e in run.events() if e.type == "structured_result_repair"]
    assert "not valid JSON" in repair.data["validation_errors"][0]


@pytest.mark.parametrize("depth", [101, 1_500, 50_000])
def test_an_answer_nested_too_deep_is_repaired_then_fails_with_structured_result_error(config, script, depth):
    # 1,500 levels parse but overflow validation; 50,000 overflow the parser itself.
    deep = "[" * depth + "]" * depth
    repaired = script([{"text": deep}, {"structured": VALID}])
    run = triage_agent(repaired).ask("Where is my parcel?")

    assert run.outcome == "completed", run.error
    assert run.result.output == VALID
    [repair] = [e for e in run.events() if e.type == "structured_result_repair"]
    assert list(repair.data["validation_errors"]) == ["the response nests more than 100 levels deep"]

    twice = script([{"text": deep}, {"text": deep}])
    run = triage_agent(twice).ask("Where is my parcel?")

    assert run.outcome == "failed"
    assert isinstance(run.error, StructuredResultError)
    assert list(run.error.validation_errors) == ["the response nests more than 100 levels deep"]


def test_invalid_twice_fails_with_structured_result_error(config, script):
    target = script(
        [
            {"structured": {"category": "teleport", "urgent": True}},
            {"structured": {"category": "delivery"}},
        ]
    )
    run = triage_agent(target).ask("Where is my parcel?")

    assert run.outcome == "failed"
    assert isinstance(run.error, StructuredResultError)
    assert run.error.schema_name == "support_triage"
    assert run.error.validation_errors
    assert any("urgent" in problem for problem in run.error.validation_errors)
    assert run.response is None
    assert event_types(run).count("structured_result_repair") == 1
    assert event_types(run)[-1] == "run_error"


def test_a_failed_run_counts_the_usage_of_its_second_invalid_result(config, script):
    target = script(
        [
            {"structured": {"category": "teleport"}, "usage": {"input_tokens": 10, "output_tokens": 1}},
            {"structured": {"category": "nowhere"}, "usage": {"input_tokens": 20, "output_tokens": 2}},
        ]
    )
    run = triage_agent(target).ask("Where is my parcel?")

    assert run.outcome == "failed"
    both = lg_core.Usage(input_tokens=30, output_tokens=3)
    logged = sum((e.data["usage"] for e in run.events() if e.type == "usage"), lg_core.Usage())
    assert logged == both
    assert run.usage == both
    assert run.events()[-1].data["usage"] == both
    assert lg_core.Usage.from_dict(run.runtime.store.load_run(run.id).usage) == both


@pytest.mark.parametrize("capabilities", [None, NO_NATIVE], ids=["provider strategy", "tool strategy"])
def test_a_result_the_output_limit_cut_off_fails_with_output_limit_error_not_a_repair(config, script, capabilities):
    target, requests = recording(
        script,
        [{"text": '{"category": "deliv', "stop_reason": "max_tokens"}, {"structured": VALID}],
        capabilities=capabilities,
    )
    run = triage_agent(target).ask("Missing package")

    assert run.outcome == "failed"
    assert type(run.error) is lg_core.OutputLimitError
    assert "before it gave a valid result for the schema 'support_triage'" in str(run.error)
    assert len(requests) == 1 and "structured_result_repair" not in event_types(run)
    assert config.runtime().store.load_run(run.id).error["name"] == "OutputLimitError"


def test_a_valid_result_that_reached_the_output_limit_is_accepted(config, script):
    run = triage_agent(script([{"structured": VALID, "stop_reason": "max_tokens"}])).ask("Missing package")

    assert run.outcome == "completed", run.error
    assert run.result.output == VALID


# -- tool strategy -------------------------------------------------------------------------------


def test_auto_strategy_uses_a_terminal_submit_tool_without_native_support(config, script):
    turns = [{"tool_calls": [{"name": "submit_support_triage", "arguments": VALID}]}]
    target, requests = recording(script, turns, capabilities=NO_NATIVE)
    run = triage_agent(target).ask("Missing package")

    assert run.outcome == "completed"
    assert run.result.output == VALID
    assert run.result.structured_result.schema_name == "support_triage"
    [request] = requests
    assert request.output_schema is None
    assert [spec.name for spec in request.tools] == ["submit_support_triage"]
    assert "tool_execution_stop" not in event_types(run), "the terminal tool is not executed as an application tool"


def test_an_unknown_tool_call_lists_the_submit_tool_among_the_available_ones(config, script):
    turns = [
        {"tool_calls": [{"name": "lookup_order", "arguments": {}}]},
        {"tool_calls": [{"name": "submit_support_triage", "arguments": VALID}]},
    ]
    target, requests = recording(script, turns, capabilities=NO_NATIVE)
    run = triage_agent(target).ask("Missing package")

    assert run.outcome == "completed"
    [result] = requests[1].messages[-1].tool_results
    assert result.status == "error"
    assert "Unknown tool 'lookup_order'. Available tools: submit_support_triage." in result.text


def test_provider_strategy_offers_no_submit_tool_to_list(config, script):
    turns = [{"tool_calls": [{"name": "lookup_order", "arguments": {}}]}, {"structured": VALID}]
    target, requests = recording(script, turns)
    run = triage_agent(target).ask("Missing package")

    assert run.outcome == "completed"
    [result] = requests[1].messages[-1].tool_results
    assert "Available tools: none." in result.text


def test_tool_strategy_repairs_an_invalid_submission(config, script):
    turns = [
        {"tool_calls": [{"name": "submit_support_triage", "arguments": {"category": "delivery"}}]},
        {"tool_calls": [{"name": "submit_support_triage", "arguments": VALID}]},
    ]
    target, requests = recording(script, turns, capabilities=NO_NATIVE)
    run = triage_agent(target, {**TRIAGE, "strategy": "tool"}).ask("Missing package")

    assert run.outcome == "completed"
    assert run.result.output == VALID
    assert len(requests) == 2
    [result] = requests[1].messages[-1].tool_results
    assert result.status == "error"
    assert "urgent" in result.text


def test_tool_strategy_text_answer_is_repaired_then_fails_when_still_missing(config, script):
    target = script([{"text": "delivery, urgent"}, {"text": "still just text"}], capabilities=NO_NATIVE)
    run = triage_agent(target).ask("Missing package")

    assert run.outcome == "failed"
    assert isinstance(run.error, StructuredResultError)
    assert "submit_support_triage" in str(run.error)


def test_tool_strategy_repair_of_a_text_answer_asks_only_for_the_submit_tool(config, script):
    """One instruction for the active strategy: never also "answer with only a JSON object"."""
    turns = [{"text": "delivery, urgent"}, {"tool_calls": [{"name": "submit_support_triage", "arguments": VALID}]}]
    target, requests = recording(script, turns, capabilities=NO_NATIVE)
    run = triage_agent(target, {**TRIAGE, "strategy": "tool"}).ask("Missing package")

    assert run.outcome == "completed" and run.result.output == VALID
    instruction = requests[1].messages[-1]
    assert instruction.role == "user"
    assert "Call the tool 'submit_support_triage'" in instruction.text
    assert "JSON object" not in instruction.text


def test_tool_strategy_repair_of_an_invalid_submission_asks_for_the_submit_tool(config, script):
    turns = [
        {"tool_calls": [{"name": "submit_support_triage", "arguments": {"category": "delivery"}}]},
        {"tool_calls": [{"name": "submit_support_triage", "arguments": VALID}]},
    ]
    target, requests = recording(script, turns, capabilities=NO_NATIVE)
    run = triage_agent(target, {**TRIAGE, "strategy": "tool"}).ask("Missing package")

    assert run.outcome == "completed"
    [result] = requests[1].messages[-1].tool_results
    assert "Call the tool 'submit_support_triage'" in result.text and "JSON object" not in result.text


def test_tool_strategy_takes_no_json_answered_in_text_after_the_repair(config, script):
    """With the terminal tool the result comes only through it (the spec: "that exact path")."""
    target = script([{"text": "delivery, urgent"}, {"text": json.dumps(VALID)}], capabilities=NO_NATIVE)
    run = triage_agent(target, {**TRIAGE, "strategy": "tool"}).ask("Missing package")

    assert run.outcome == "failed" and isinstance(run.error, StructuredResultError)
    assert "instead of calling the tool 'submit_support_triage'" in str(run.error)


def test_provider_strategy_repair_asks_for_only_a_json_object(config, script):
    target, requests = recording(script, [{"text": "delivery, urgent"}, {"structured": VALID}])
    run = triage_agent(target).ask("Missing package")

    assert run.outcome == "completed"
    instruction = requests[1].messages[-1].text
    assert "Answer again with only a corrected JSON object." in instruction
    assert "Call the tool" not in instruction


def test_provider_strategy_on_a_model_without_native_support_raises_before_a_run_starts(config, script):
    """The spec: "LittleGhost raises ConfigurationError before execution if the selected model cannot provide it"."""
    calls = []

    def serve(request):
        calls.append(request)
        return {"structured": VALID}

    target = script(serve, capabilities=NO_NATIVE)
    agent = triage_agent(target, {**TRIAGE, "strategy": "provider"})

    for start in (agent.ask, agent.stream_ask, agent.start_execution):
        with pytest.raises(ConfigurationError, match="native structured output"):
            start("Missing package")
    assert calls == [], "no model call is made with an unsupported strategy"
    assert lg_core.list_runs() == []


# -- Pydantic result models -------------------------------------------------------------------------


class Triage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    category: str
    urgent: bool


def test_pydantic_result_model_output_is_a_model_instance(config, script):
    target = script([{"structured": VALID}])
    run = triage_agent(target, Triage).ask("Missing package")

    assert run.outcome == "completed"
    output = run.result.output
    assert isinstance(output, Triage)
    assert output == Triage(category="delivery", urgent=True)
    assert run.result.structured_result.value == VALID


def test_pydantic_result_model_validation_errors_are_repaired(config, script):
    target = script([{"structured": {"category": "delivery"}}, {"structured": VALID}])
    run = triage_agent(target, Triage).ask("Missing package")

    assert run.outcome == "completed"
    assert isinstance(run.result.output, Triage)
    assert event_types(run).count("structured_result_repair") == 1


def test_a_structured_agent_may_call_tools_before_answering(config, script):
    from lg_core import Tool

    class OrderTool(Tool):
        tool_name = "order_status"
        description = "Order status."

        def call(self, input):
            return "lost in transit"

    turns = [{"tool_calls": [{"name": "order_status", "arguments": {}}]}, {"structured": VALID}]
    target, requests = recording(script, turns)
    Agent_ = type("ToolTriage", (Agent,), {"model": target, "result_schema": TRIAGE, "tools": [OrderTool]})
    run = Agent_.ask("Where is my parcel?")

    assert run.outcome == "completed"
    assert run.result.output == VALID
    assert "structured_result_repair" not in event_types(run), "a tool turn is not an invalid result"
    assert [m.role for m in run.result.messages] == ["user", "assistant", "tool", "assistant"]


# -- the repair turn --------------------------------------------------------------------------------


class OrderTool(lg_core.Tool):
    """Records each call: a tool called in a repair turn must never run."""

    tool_name = "order_status"
    description = "Order status."
    calls: list[dict] = []

    def call(self, input):
        OrderTool.calls.append(dict(input))
        return "lost in transit"


def triage_agent_with_tools(target, schema=None):
    return type("ToolTriage", (Agent,), {"model": target, "result_schema": schema or TRIAGE, "tools": [OrderTool]})


@pytest.fixture
def order_calls():
    OrderTool.calls = []
    return OrderTool.calls


SUBMIT = {"name": "submit_support_triage", "arguments": VALID}
STRATEGIES = [
    pytest.param(None, {"structured": VALID}, [], id="provider strategy"),
    pytest.param(NO_NATIVE, {"tool_calls": [SUBMIT]}, ["submit_support_triage"], id="tool strategy"),
]


@pytest.mark.parametrize(("capabilities", "answer", "offered"), STRATEGIES)
def test_the_repair_turn_offers_only_the_way_to_answer(config, script, capabilities, answer, offered):
    target, requests = recording(script, [{"text": "delivery, urgent"}, answer], capabilities=capabilities)
    run = triage_agent_with_tools(target).ask("Missing package")

    assert run.outcome == "completed", run.error
    assert run.result.output == VALID
    first, repair = requests
    assert "order_status" in [tool.name for tool in first.tools]
    assert [tool.name for tool in repair.tools] == offered


@pytest.mark.parametrize(("capabilities", "answer", "offered"), STRATEGIES)
def test_an_ordinary_tool_called_in_the_repair_turn_fails_the_run_and_never_runs(
    config, script, order_calls, capabilities, answer, offered
):
    """The spec allows one repair attempt, not more tool work: the call is the second invalid response."""
    turns = [{"text": "delivery, urgent"}, {"tool_calls": [{"name": "order_status", "arguments": {}}]}, answer]
    target, requests = recording(script, turns, capabilities=capabilities)
    run = triage_agent_with_tools(target).ask("Missing package")

    assert run.outcome == "failed"
    assert type(run.error) is StructuredResultError
    assert "in its repair turn, which offers" in str(run.error) and "it called the tool 'order_status'" in str(
        run.error
    )
    assert run.error.schema_name == "support_triage"
    assert order_calls == [] and "tool_execution_start" not in event_types(run)
    assert len(requests) == 2
    record = config.runtime().store.load_run(run.id)
    assert (record.status, record.error["name"]) == ("failed", "StructuredResultError")


def test_a_valid_submission_in_the_repair_turn_is_taken_and_a_call_beside_it_never_runs(config, script, order_calls):
    turns = [{"text": "delivery, urgent"}, {"tool_calls": [{"name": "order_status", "arguments": {}}, SUBMIT]}]
    target, _ = recording(script, turns, capabilities=NO_NATIVE)
    run = triage_agent_with_tools(target).ask("Missing package")

    assert run.outcome == "completed", run.error
    assert run.result.output == VALID
    assert order_calls == []
    [not_run] = [r for r in run.result.messages[-1].tool_results if r.status == "error"]
    assert "Not run" in not_run.text


def test_tools_are_offered_again_in_a_turn_after_the_repair_turn(config, script, order_calls):
    """A user message that arrives while the repair turn runs continues the run: its next turn is an ordinary one."""

    def serve(request):
        sequence = request.metadata["sequence"]
        if sequence == 1:  # the repair turn: a user message arrives meanwhile
            lg_core.get_execution(request.metadata["run_id"]).interject("And check order 42, please.")
            return {"tool_calls": [SUBMIT]}
        if sequence == 2:
            return {"tool_calls": [{"name": "order_status", "arguments": {"order": 42}}]}
        return {"text": "delivery, urgent"} if sequence == 0 else {"tool_calls": [SUBMIT]}

    requests = []

    def recorded(request):
        requests.append(request)
        return serve(request)

    run = triage_agent_with_tools(script(recorded, capabilities=NO_NATIVE)).ask("Missing package")

    assert run.outcome == "completed", run.error
    assert [sorted(tool.name for tool in request.tools) for request in requests] == [
        ["order_status", "submit_support_triage"],
        ["submit_support_triage"],
        ["order_status", "submit_support_triage"],
        ["order_status", "submit_support_triage"],
    ]
    assert order_calls == [{"order": 42}]
