"""Tool inputs and structured results at the edges of JSON and JSON Schema.

Strict Pydantic inputs validated as the JSON they arrive as, the structured-result
submit tool's reserved name, recursive Pydantic models (a top-level ``$ref``), and
numbers JSON does not have (NaN, infinities).
"""

from __future__ import annotations

import datetime
import enum
import uuid

import pytest
from pydantic import BaseModel, ConfigDict

from lg_core import Agent, ConfigurationError, Tool, ToolRegistry
from lg_core.result_schema import ResultSchema, parse_json_text, root_resolved
from tests.support.recording import recording

NO_NATIVE = {"native_structured_output": False}
NUMBER = {
    "type": "object",
    "properties": {"x": {"type": "number"}},
    "required": ["x"],
    "additionalProperties": False,
}


def repairs(run):
    return [event.data["validation_errors"] for event in run.events() if event.type == "structured_result_repair"]


# -- 1. a strict Input model validates the JSON the model sends ---------------------------------


class Color(enum.Enum):
    red = "red"
    blue = "blue"


class StrictSchedule(BaseModel):
    model_config = ConfigDict(strict=True)
    when: datetime.datetime
    color: Color
    id: uuid.UUID


SCHEDULE_ARGS = {"when": "2024-01-02T03:04:05Z", "color": "red", "id": "12345678-1234-5678-1234-567812345678"}


class ScheduleTool(Tool):
    description = "Schedule a job."
    Input = StrictSchedule

    def call(self, input):
        assert isinstance(input, StrictSchedule)
        return f"{input.when.isoformat()} {input.color.name} {input.id}"


def test_a_strict_input_model_accepts_the_json_its_schema_asks_for():
    assert ScheduleTool.input_schema["properties"]["when"]["format"] == "date-time"

    outcome = ScheduleTool().execute(SCHEDULE_ARGS)

    assert outcome.ok, outcome.text
    assert outcome.text == "2024-01-02T03:04:05+00:00 red 12345678-1234-5678-1234-567812345678"


def test_a_strict_input_model_still_rejects_a_wrong_value_naming_the_field():
    outcome = ScheduleTool().execute({**SCHEDULE_ARGS, "color": "green"})

    assert outcome.error_kind == "validation"
    assert "color" in outcome.text


def test_input_that_is_not_json_is_validated_in_python_mode():
    class When(BaseModel):
        when: datetime.date

    class WhenTool(Tool):
        description = "d"
        Input = When

        def call(self, input):
            return input.when.year

    # An application handing Python objects to execute_validated, the engine never does.
    assert WhenTool().execute_validated({"when": datetime.date(2024, 1, 2)}).text == "2024"


def test_a_strict_input_tool_runs_in_an_agent(config, script):
    target, requests = recording(
        script, [{"tool_calls": [{"name": "schedule", "arguments": SCHEDULE_ARGS}]}, {"text": "Scheduled."}]
    )
    run = type("SchedulingAgent", (Agent,), {"model": target, "tools": [ScheduleTool]}).ask("Schedule it.")

    assert run.outcome == "completed"
    [result] = [event for event in run.events() if event.type == "tool_execution_stop"]
    assert result.data["status"] == "success"
    assert result.data["output"].startswith("2024-01-02T03:04:05+00:00 red")


# -- 2. the structured-result submit tool's name is reserved ------------------------------------


class SubmitResultTool(Tool):  # tool_name "submit_result": the default result schema's submit tool
    description = "Submit a support ticket."

    def call(self, input):
        return "filed"


TOOL_RESULT = {**NUMBER, "strategy": "tool"}


@pytest.mark.parametrize("schema", [NUMBER, TOOL_RESULT])
def test_a_tool_named_like_the_submit_tool_fails_at_class_definition(schema):
    with pytest.raises(
        ConfigurationError, match=r"SubmitResultTool \(tool 'submit_result'\) has the name of the submit tool"
    ) as info:

        class TicketAgent(Agent):
            tools = [SubmitResultTool]
            result_schema = schema

    assert "TicketAgent.tools" in str(info.value)


def test_a_result_schema_added_in_a_subclass_is_checked_against_inherited_tools():
    class TicketAgent(Agent):
        tools = [SubmitResultTool]

    with pytest.raises(ConfigurationError, match="has the name of the submit tool"):

        class StructuredTicketAgent(TicketAgent):
            result_schema = NUMBER


def test_a_tool_added_in_a_subclass_is_checked_against_the_inherited_result_schema():
    class StructuredAgent(Agent):
        result_schema = NUMBER

    with pytest.raises(ConfigurationError, match="has the name of the submit tool"):

        class TicketAgent(StructuredAgent):
            tools = [SubmitResultTool]


def test_the_submit_name_follows_the_result_schema_name_and_is_free_without_a_submit_tool():
    class Named(Agent):  # the submit tool is submit_ticket
        tools = [SubmitResultTool]
        result_schema = {**NUMBER, "name": "ticket"}

    class Provider(Agent):  # strategy provider never offers a submit tool
        tools = [SubmitResultTool]
        result_schema = {**NUMBER, "strategy": "provider"}

    class Cleared(Named):
        result_schema = None

    assert SubmitResultTool in Named.tools and SubmitResultTool in Provider.tools and Cleared.result_spec() is None


class SubmitterProvider:
    @classmethod
    def tools(cls, binding):
        return [SubmitResultTool]


def test_a_provided_tool_named_like_the_submit_tool_fails_the_run_clearly(config, script):
    ran = []

    class SpyTool(SubmitResultTool):
        tool_name = "submit_result"

        def call(self, input):
            ran.append(input)
            return "filed"

    class SpyProvider:
        @classmethod
        def tools(cls, binding):
            return [SpyTool]

    target = script([{"tool_calls": [{"name": "submit_result", "arguments": {"x": 1}}]}])

    class TicketAgent(Agent):  # providers' tools are known only when a run builds them
        model = target
        tools = [SpyProvider]
        result_schema = TOOL_RESULT

    run = TicketAgent.ask("File it.")

    assert run.outcome == "failed"
    assert isinstance(run.error, ConfigurationError)
    assert "tool 'submit_result' (" in str(run.error) and "TicketAgent's result_schema 'result'" in str(run.error)
    assert run.result is None and ran == []


def test_the_registry_refuses_reserved_names_when_built_and_registering():
    reserved = {"submit_result": "the submit tool"}
    with pytest.raises(ConfigurationError, match="'submit_result' .* has the name of the submit tool"):
        ToolRegistry([SubmitterProvider], reserved=reserved)

    registry = ToolRegistry([], reserved=reserved)
    with pytest.raises(ConfigurationError, match="has the name of the submit tool"):
        registry.register(SubmitResultTool)
    assert registry.names == []
    assert ToolRegistry([SubmitResultTool]).names == ["submit_result"]


# -- 3. recursive Pydantic models: a top-level $ref ------------------------------------------------


class Node(BaseModel):
    name: str
    children: list[Node] = []


class StrictNode(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    children: list[StrictNode]


class TreeTool(Tool):
    description = "Store a tree."
    Input = Node

    def call(self, input):
        return f"{input.name} has {len(input.children)} children, first {input.children[0].name}"


def test_a_recursive_input_model_is_offered_as_an_object_schema():
    assert Node.model_json_schema()["$ref"] == "#/$defs/Node"
    schema = TreeTool.specification().input_schema

    assert schema["type"] == "object" and "$ref" not in schema
    assert schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert TreeTool().validate({"name": "a", "children": [{"name": 5}]}) == [
        "children/0/name: 5 is not of type 'string'"
    ]


def test_a_recursive_input_tool_runs_in_an_agent(config, script):
    tree = {"name": "root", "children": [{"name": "leaf", "children": [{"name": "deeper"}]}]}
    target, requests = recording(script, [{"tool_calls": [{"name": "tree", "arguments": tree}]}, {"text": "Stored."}])
    run = type("TreeAgent", (Agent,), {"model": target, "tools": [TreeTool]}).ask("Store it.")

    assert run.outcome == "completed"
    [spec] = requests[0].tools
    assert spec.input_schema["type"] == "object"
    [result] = [event for event in run.events() if event.type == "tool_execution_stop"]
    assert result.data["output"] == "root has 1 children, first leaf"


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"$ref": "#/$defs/Missing", "$defs": {}}, r"top-level \$ref '#/\$defs/Missing' does not resolve"),
        ({"$ref": "#"}, r"top-level \$ref '#' leads back to itself"),
        (
            {"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}},
            r"leads back to itself",
        ),
        (
            {"$ref": "https://example.com/node.json"},
            r"top-level \$ref 'https://example.com/node.json' does not resolve",
        ),
        (
            {"$ref": "#/$defs/A", "type": "array", "$defs": {"A": {"type": "object"}}},
            r"keywords beside it that its definition sets differently: \['type'\]",
        ),
        ({"$ref": "#/$defs/A", "$defs": {"A": {"type": "string"}}}, r"must describe an object \(type: object\)"),
    ],
)
def test_a_top_level_ref_that_cannot_become_an_object_names_the_cause(schema, match):
    with pytest.raises(ConfigurationError, match=match):

        class RefTool(Tool):
            description = "d"
            input_schema = schema


def test_a_strict_recursive_result_schema_is_accepted_and_checked_like_any_other():
    spec = ResultSchema.build(StrictNode, "TreeAgent")

    assert spec.schema["type"] == "object" and "$ref" not in spec.schema
    assert spec.validate({"name": "a", "children": [{"name": "b", "children": [], "extra": 1}]}) == [
        "children/0: Additional properties are not allowed ('extra' was unexpected)"
    ]
    assert ResultSchema(schema=StrictNode.model_json_schema()).schema == spec.schema


def test_a_loose_recursive_result_schema_is_rejected_for_strictness_once():
    with pytest.raises(ConfigurationError, match="is not strict") as info:

        class LooseTreeAgent(Agent):
            result_schema = Node

    message = str(info.value)
    assert "$ must set additionalProperties: false" in message
    assert "missing ['children']" in message
    assert "$defs.Node" not in message  # the definition the top level was taken from: reported once, as $


def test_strictness_problems_inside_a_recursive_definition_are_found():
    schema = {
        "$ref": "#/$defs/Tree",
        "$defs": {
            "Tree": {
                "type": "object",
                "properties": {"branches": {"type": "array", "items": {"$ref": "#/$defs/Branch"}}},
                "required": ["branches"],
                "additionalProperties": False,
            },
            "Branch": {"type": "object", "properties": {"tree": {"$ref": "#/$defs/Tree"}}, "required": ["tree"]},
        },
    }
    with pytest.raises(ConfigurationError, match=r"\$defs\.Branch must set additionalProperties: false"):

        class BranchAgent(Agent):
            result_schema = schema

    with pytest.raises(
        ConfigurationError, match=r"result_schema: the top-level \$ref '#/\$defs/Nope' does not resolve"
    ):

        class DanglingAgent(Agent):
            result_schema = {"$ref": "#/$defs/Nope", "$defs": {}}


@pytest.mark.parametrize("capabilities", [None, NO_NATIVE])
def test_a_recursive_result_schema_completes_a_run(config, script, capabilities):
    tree = {"name": "root", "children": [{"name": "leaf", "children": []}]}
    turn = (
        {"structured": tree}
        if capabilities is None
        else {"tool_calls": [{"name": "submit_strict_node", "arguments": tree}]}
    )
    target, requests = recording(script, [turn], capabilities=capabilities)

    run = type("TreeAgent", (Agent,), {"model": target, "result_schema": StrictNode}).ask("A tree, please.")

    assert run.outcome == "completed"
    assert run.result.output == StrictNode(name="root", children=[StrictNode(name="leaf", children=[])])
    request = requests[0]
    offered = request.output_schema["schema"] if capabilities is None else request.tools[-1].input_schema
    assert offered["type"] == "object" and "$defs" in offered


def test_root_resolved_keeps_schemas_without_a_top_level_ref():
    assert root_resolved(NUMBER) == (NUMBER, None)
    assert root_resolved([1]) == ([1], None)


# -- 4. numbers JSON does not have ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"x": NaN}', "NaN is not a JSON number"),
        ('{"x": Infinity}', "Infinity is not a JSON number"),
        ('{"x": [-Infinity]}', "-Infinity is not a JSON number"),
        ('{"x": 1e999}', "the number 1e999 is too large to represent"),
        ('{"x": -1e999}', "the number -1e999 is too large to represent"),
    ],
)
def test_non_json_numbers_are_not_valid_json(text, problem):
    assert parse_json_text(text) == (None, f"the response is not valid JSON ({problem})")


def test_large_but_finite_numbers_still_parse():
    assert parse_json_text('{"x": 1e308, "y": 1' + "0" * 400 + "}") == ({"x": 1e308, "y": 10**400}, None)


@pytest.mark.parametrize("bad", ['{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}', '{"x": 1e999}'])
def test_a_non_json_number_in_a_provider_result_is_repaired(config, script, bad):
    target = script([{"text": bad}, {"text": '{"x": 1.5}'}])
    run = type("NumberAgent", (Agent,), {"model": target, "result_schema": NUMBER}).ask("A number.")

    assert run.outcome == "completed"
    assert run.result.output == {"x": 1.5}
    [[problem]] = repairs(run)
    assert problem.startswith("the response is not valid JSON (") and bad[6:-1].lstrip("-") in problem
