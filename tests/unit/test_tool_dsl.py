"""The Tool class DSL, Tool.execute and ToolRegistry."""

from __future__ import annotations

import asyncio
import json
import typing
from datetime import date

import pytest
from pydantic import BaseModel, ConfigDict, Field, field_validator

from lg_core import (
    AbstractMethodError,
    Agent,
    Artifact,
    Binding,
    CancelledError,
    CleanupError,
    ConfigurationError,
    DeadlineExceededError,
    Document,
    Image,
    Text,
    Tool,
    ToolError,
    ToolOutcome,
    ToolRegistry,
)
from lg_core.providers import scripted
from lg_core.run_context import RunContext
from lg_core.tool_declarations import default_tool_name
from lg_core.tool_values import render_value

TOPIC_SCHEMA = {
    "type": "object",
    "properties": {"topic": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
    "required": ["topic"],
    "additionalProperties": False,
}


class HelpCenterLookupTool(Tool):
    description = "Look up a help center entry by topic."
    input_schema = TOPIC_SCHEMA

    def call(self, input):
        return f"entry for {input['topic']}"


# -- names -------------------------------------------------------------------------------


def test_default_tool_name_comes_from_the_class_name():
    assert HelpCenterLookupTool.tool_name == "help_center_lookup"


@pytest.mark.parametrize(
    ("class_name", "expected"),
    [
        ("HelpCenterLookupTool", "help_center_lookup"),
        ("HTTPFetchTool", "http_fetch"),
        ("Search", "search"),
        ("Tool", "tool"),
        ("Lookup2Tool", "lookup2"),
        ("RésuméTool", "resume"),
    ],
)
def test_default_tool_name_rules(class_name, expected):
    assert default_tool_name(class_name) == expected


def test_an_accented_class_name_gives_a_valid_default_tool_name():
    """``RésuméTool`` was refused with a message about a tool_name the user never set."""
    assert type("RésuméTool", (Tool,), {"description": "d"}).tool_name == "resume"


@pytest.mark.parametrize("name", ["日本Tool", "X" * 70 + "Tool"])
def test_a_class_name_that_gives_no_valid_tool_name_asks_for_one(name):
    with pytest.raises(
        ConfigurationError, match=r"the tool_name derived from the class name, .* is not valid .*set tool_name = "
    ):
        type(name, (Tool,), {"description": "d"})

    assert type(name, (Tool,), {"description": "d", "tool_name": "named"}).tool_name == "named"


def test_explicit_tool_name_is_kept():
    class TicketStatusTool(Tool):
        tool_name = "ticket-status_v2"
        description = "d"

    assert TicketStatusTool.tool_name == "ticket-status_v2"
    assert TicketStatusTool().tool_name == "ticket-status_v2"


def test_subclass_gets_its_own_default_name_but_inherits_the_schema():
    class ExtendedLookupTool(HelpCenterLookupTool):
        pass

    assert ExtendedLookupTool.tool_name == "extended_lookup"
    assert ExtendedLookupTool.specification().to_dict()["input_schema"] == TOPIC_SCHEMA
    assert ExtendedLookupTool().validate({}) == ["'topic' is a required property"]


@pytest.mark.parametrize("bad", ["has space", "", "x" * 65, "dots.not.allowed", "ümlaut", 5, None])
def test_invalid_tool_name_fails_at_class_definition(bad):
    with pytest.raises(ConfigurationError, match=r"tool_name .* must be 1-64 letters, digits, '_' or '-'"):

        class BadNameTool(Tool):
            tool_name = bad
            description = "d"


def test_non_string_description_fails_at_class_definition():
    with pytest.raises(ConfigurationError, match="description must be a string"):

        class NumberTool(Tool):
            description = 42


# -- input schemas --------------------------------------------------------------------------


def test_dict_schema_becomes_the_specification():
    spec = HelpCenterLookupTool.specification()
    assert spec.name == "help_center_lookup"
    assert spec.description == "Look up a help center entry by topic."
    assert spec.to_dict()["input_schema"] == TOPIC_SCHEMA


def test_schema_is_copied_at_class_definition():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}

    class CopyTool(Tool):
        description = "d"
        input_schema = schema

    schema["properties"]["a"]["type"] = "integer"
    assert CopyTool.specification().input_schema["properties"]["a"]["type"] == "string"


def test_no_schema_means_any_object():
    class FreeformTool(Tool):
        description = "d"

        def call(self, input):
            return sorted(input)

    assert FreeformTool.specification().input_schema == {"type": "object"}
    assert FreeformTool().execute({"b": 1, "a": 2}).text == '["a", "b"]'
    assert FreeformTool().validate(["not", "an", "object"]) == ["input must be a JSON object, got list"]


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str
    limit: int = Field(default=3, ge=1)

    @field_validator("topic")
    @classmethod
    def _no_secrets(cls, value: str) -> str:
        if value == "secrets":
            raise ValueError("that topic is off limits")
        return value


def test_pydantic_model_as_input_schema():
    class ModelSchemaTool(Tool):
        description = "d"
        input_schema = Query

        def call(self, input):
            return {"type": type(input).__name__, "topic": input.topic, "limit": input.limit}

    assert ModelSchemaTool.specification().to_dict()["input_schema"] == Query.model_json_schema()
    outcome = ModelSchemaTool().execute({"topic": "refunds"})
    assert outcome.ok
    assert outcome.value == {"type": "Query", "topic": "refunds", "limit": 3}


def test_nested_input_model_gives_call_a_model_instance():
    seen = []

    class SearchTool(Tool):
        description = "Search."

        class Input(BaseModel):
            query: str
            page: int = 1

        def call(self, input):
            seen.append(input)
            return f"{input.query}:{input.page}"

    assert SearchTool.specification().to_dict()["input_schema"] == SearchTool.Input.model_json_schema()
    assert SearchTool().execute({"query": "q", "page": 2}).text == "q:2"
    assert isinstance(seen[0], SearchTool.Input)


def test_input_model_validator_errors_are_validation_outcomes_naming_the_field():
    class GuardedTool(Tool):
        description = "d"
        Input = Query

        def call(self, input):  # pragma: no cover - must not run
            raise AssertionError("call ran with invalid input")

    outcome = GuardedTool().execute({"topic": "secrets"})
    assert outcome.status == "error"
    assert outcome.error_kind == "validation"
    assert "Invalid input for tool 'guarded'" in outcome.text
    assert "topic" in outcome.text and "that topic is off limits" in outcome.text


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"type": "object", "properties": {"a": {"type": "nonsense"}}}, "is not valid JSON Schema"),
        ({"type": "object", "required": "topic"}, "is not valid JSON Schema"),
        ({"type": "object", "properties": {"a": {"minLength": -1}}}, "is not valid JSON Schema"),
    ],
)
def test_invalid_json_schema_fails_at_class_definition(schema, match):
    with pytest.raises(ConfigurationError, match=f"BrokenTool.input_schema {match}"):

        class BrokenTool(Tool):
            description = "d"
            input_schema = schema


@pytest.mark.parametrize("ref", ["#/$defs/Missing", "https://example.com/schemas/order.json", "other.json#/Order"])
def test_a_ref_that_does_not_resolve_inside_the_schema_fails_at_class_definition(ref):
    """It passed check_schema, then failed the whole run with a raw referencing error the
    first time the model called the tool."""
    with pytest.raises(ConfigurationError, match=r"RefTool.input_schema: \$.properties.order \$ref"):

        class RefTool(Tool):
            description = "d"
            input_schema = {"type": "object", "properties": {"order": {"$ref": ref}}}


def test_local_refs_into_defs_are_accepted():
    class DefsTool(Tool):
        description = "d"
        input_schema = {
            "type": "object",
            "properties": {"order": {"$ref": "#/$defs/Order"}},
            "$defs": {"Order": {"type": "object", "properties": {"id": {"type": "string"}}}},
        }

    assert DefsTool().validate({"order": {"id": 5}}) == ["order/id: 5 is not of type 'string'"]


@pytest.mark.parametrize("schema", [{"type": "array"}, {"type": "string"}, {"type": ["object", "null"]}])
def test_non_object_schema_is_rejected(schema):
    with pytest.raises(ConfigurationError, match=r"must describe an object \(type: object\)"):

        class ListTool(Tool):
            description = "d"
            input_schema = schema


@pytest.mark.parametrize("schema", [["type", "object"], "object", 5])
def test_schema_must_be_a_dict_or_model(schema):
    with pytest.raises(ConfigurationError, match="input_schema must be a dict or a Pydantic model"):

        class WeirdTool(Tool):
            description = "d"
            input_schema = schema


# -- execute ---------------------------------------------------------------------------------


def test_execute_success():
    outcome = HelpCenterLookupTool().execute({"topic": "refunds"})
    assert isinstance(outcome, ToolOutcome)
    assert outcome.ok and outcome.status == "success"
    assert outcome.content == (Text(text="entry for refunds"),)
    assert outcome.value == "entry for refunds"
    assert outcome.error is None and outcome.error_kind is None


@pytest.mark.parametrize(
    ("input", "fragments"),
    [
        ({}, ["'topic' is a required property"]),
        ({"topic": 5}, ["topic: 5 is not of type 'string'"]),
        ({"topic": "x", "limit": 0}, ["limit: 0 is less than the minimum of 1"]),
        ({"topic": "x", "extra": True}, ["'extra' was unexpected"]),
        ("refunds", ["input must be a JSON object, got str"]),
    ],
)
def test_validation_errors_become_error_outcomes_naming_the_field(input, fragments):
    outcome = HelpCenterLookupTool().execute(input)
    assert outcome.status == "error"
    assert outcome.error_kind == "validation"
    assert outcome.text.startswith("Invalid input for tool 'help_center_lookup': ")
    for fragment in fragments:
        assert fragment in outcome.text


def test_execute_does_not_let_call_mutate_the_callers_input():
    class MutatingTool(Tool):
        description = "d"

        def call(self, input):
            input["nested"]["x"] = "changed"
            return "ok"

    original = {"nested": {"x": "original"}}
    MutatingTool().execute(original)
    assert original == {"nested": {"x": "original"}}


def test_tool_error_message_is_kept_for_the_model():
    error = ToolError("Order 481 belongs to another account.")

    class RefusingTool(Tool):
        description = "d"

        def call(self, input):
            raise error

    outcome = RefusingTool().execute({})
    assert outcome.status == "error"
    assert outcome.error_kind == "tool_error"
    assert outcome.text == "Order 481 belongs to another account."
    assert outcome.error is error


def test_empty_tool_error_gets_a_generic_message():
    class QuietTool(Tool):
        description = "d"

        def call(self, input):
            raise ToolError()

    assert QuietTool().execute({}).text == "The tool reported an error."


def test_unexpected_exception_shows_only_its_class_name():
    secret = KeyError("postgres://admin:hunter2@db/internal")

    class CrashingTool(Tool):
        description = "d"

        def call(self, input):
            raise secret

    outcome = CrashingTool().execute({})
    assert outcome.status == "error"
    assert outcome.error_kind == "unexpected"
    assert outcome.text == "Tool 'crashing' failed with an internal error (KeyError)."
    assert "hunter2" not in outcome.text
    assert outcome.error is secret


def test_missing_call_is_an_abstract_method_error_kept_for_the_application():
    class UnfinishedTool(Tool):
        description = "d"

    outcome = UnfinishedTool().execute({})
    assert outcome.error_kind == "unexpected"
    assert isinstance(outcome.error, AbstractMethodError)
    assert "must define call(self, input)" in str(outcome.error)


@pytest.mark.parametrize("error_class", [CancelledError, DeadlineExceededError])
def test_cancellation_and_deadline_propagate_through_except_exception(error_class):
    swallowed = []

    class GreedyTool(Tool):
        description = "d"

        def call(self, input):
            try:
                raise error_class()
            except Exception:  # noqa: BLE001 - the point of the test
                swallowed.append(True)
                return "swallowed"

    with pytest.raises(error_class):
        GreedyTool().execute({})
    assert swallowed == []


@pytest.mark.parametrize("error_class", [CancelledError, DeadlineExceededError])
def test_cancellation_and_deadline_propagate_from_async_tools(error_class):
    class AsyncGreedyTool(Tool):
        description = "d"

        async def call(self, input):
            await asyncio.sleep(0)
            try:
                raise error_class()
            except Exception:  # noqa: BLE001
                return "swallowed"

    with pytest.raises(error_class):
        AsyncGreedyTool().execute({})


def test_cleanup_error_propagates():
    class LeakyTool(Tool):
        description = "d"

        def call(self, input):
            raise CleanupError("a connection failed to close")

    with pytest.raises(CleanupError, match="failed to close"):
        LeakyTool().execute({})


def test_context_is_available_during_call_only():
    seen = []

    class ContextTool(Tool):
        description = "d"

        def call(self, input):
            seen.append(self.context)
            return "ok"

    tool = ContextTool()
    tool.execute({}, context="the-run-context")
    assert seen == ["the-run-context"]
    assert tool.context is None

    tool.execute({})  # called directly, as a test would: a fresh RunContext, as the spec's default
    assert isinstance(seen[-1], RunContext) and not seen[-1].cancellation_token.cancelled


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"status": "shipped", "eta": None}, '{"status": "shipped", "eta": null}'),
        ([1, "two", {"three": 3}], '[1, "two", {"three": 3}]'),
        ({"name": "Zoë"}, '{"name": "Zoë"}'),
        (42, "42"),
        (2.5, "2.5"),
        ((1, 2), "[1, 2]"),
        (None, ""),
        (True, "true"),
        (date(2024, 1, 2), "2024-01-02"),
        ("plain text", "plain text"),
    ],
)
def test_results_are_rendered_for_the_model(value, text):
    """The spec: "Hashes and arrays returned by a tool are JSON-encoded; other values become text"."""

    class ValueTool(Tool):
        description = "d"

        def call(self, input):
            return value

    outcome = ValueTool().execute({})
    assert outcome.text == text
    assert outcome.value == value


def test_render_value_handles_models_and_sets():
    assert render_value(Query(topic="t")) == '{"topic":"t","limit":3}'
    assert render_value({"tags": {"b", "a"}}) == '{"tags": ["a", "b"]}'


def _strict_json(text):
    """``json.loads`` refusing what Python writes but JSON does not have (NaN, Infinity)."""

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


class Reading(BaseModel):
    value: float
    raw: bytes = b""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"x": float("nan"), "y": [float("inf"), float("-inf")]}, {"x": None, "y": [None, None]}),
        ({"b": b"bytes", "bad": b"ok\xff"}, {"b": "bytes", "bad": "ok\ufffd"}),
        ({"nested": Reading(value=float("inf"), raw=b"\xff")}, {"nested": {"value": None, "raw": "\ufffd"}}),
        ({"tags": frozenset({"b", "a"}), "when": date(2024, 1, 2)}, {"tags": ["a", "b"], "when": "2024-01-02"}),
        (
            {(1, 2): "tuple key", 3: "int key", None: "none key"},
            {"(1, 2)": "tuple key", "3": "int key", "null": "none key"},
        ),
        ([bytearray(b"ab"), memoryview(b"cd")], ["ab", "cd"]),
    ],
    ids=["non-finite floats", "bytes", "nested model", "sets and dates", "keys", "bytes-like"],
)
def test_rendered_mappings_and_lists_are_valid_json_whatever_they_hold(value, expected):
    """NaN reached the model as ``NaN`` (invalid JSON) and bytes as ``"b'bytes'"``."""
    assert _strict_json(render_value(value)) == expected


def test_a_model_whose_json_mode_fails_still_renders_as_valid_json():
    assert _strict_json(render_value(Reading(value=float("nan"), raw=b"\xff"))) == {"value": None, "raw": "\ufffd"}


def test_bytes_alone_render_as_utf8_text_and_a_cycle_does_not_break_the_json():
    looped = {"name": "loop"}
    looped["self"] = looped

    assert render_value(b"caf\xc3\xa9 \xff") == "café \ufffd"
    assert _strict_json(render_value(looped)) == {"name": "loop", "self": "<circular reference>"}


# -- content blocks as results ------------------------------------------------------------------


def test_a_tool_returning_a_content_block_gives_the_model_that_block():
    """An Image return failed JSON rendering: the model read "internal error (PydanticSerializationError)"."""
    photo = Image(data=b"\x89PNG\r\n\x1a\n\xff", media_type="image/png")

    class PhotoTool(Tool):
        description = "d"

        def call(self, input):
            return photo

    outcome = PhotoTool().execute({})

    assert outcome.ok, outcome.text
    assert outcome.content == (photo,)
    assert outcome.value is photo


def test_a_tool_returning_a_list_of_content_blocks_gives_the_model_those_blocks():
    caption = Text(text="The damage, front view:")
    photo = Image(data=b"\x89PNG", media_type="image/png")
    guide = Document(data=b"%PDF", media_type="application/pdf", name="guide.pdf")
    chart = Artifact(media_type="image/png", data=b"\x89PNG-chart", name="chart.png")

    class ReviewTool(Tool):
        description = "d"

        def call(self, input):
            return Tool.Result(value=[caption, photo, guide], artifacts=[chart])

    outcome = ReviewTool().execute({})

    assert outcome.ok, outcome.text
    assert outcome.content[:3] == (caption, photo, guide)
    assert isinstance(outcome.content[3], Image) and outcome.content[3].data == b"\x89PNG-chart"
    assert outcome.text == "The damage, front view:"


def test_a_list_mixing_content_blocks_and_other_values_is_an_unexpected_tool_error():
    class MixedTool(Tool):
        description = "d"

        def call(self, input):
            return ["caption", Image(data=b"\x89PNG", media_type="image/png")]

    outcome = MixedTool().execute({})

    assert outcome.error_kind == "unexpected"
    assert "return only content blocks" in str(outcome.error)


def test_tool_result_with_artifacts():
    chart = Artifact(media_type="image/png", data=b"\x89PNG", name="chart.png")
    report = Artifact(media_type="application/pdf", data=b"%PDF", name="report.pdf")
    unnamed = Artifact(media_type="text/csv", data=b"a,b")
    stored = Artifact.deferred("s3://bucket/big.mp4", "video/mp4", name="big.mp4", metadata={"size": 10})

    class ReportTool(Tool):
        description = "d"

        def call(self, input):
            return Tool.Result({"rows": 2}, artifacts=[chart, report, unnamed, stored])

    outcome = ReportTool().execute({})
    assert outcome.ok
    assert outcome.value == {"rows": 2}
    assert outcome.artifacts == (chart, report, unnamed, stored)
    text, image, document, csv, reference = outcome.content
    assert text == Text(text='{"rows": 2}')
    assert image == Image(data=b"\x89PNG", media_type="image/png", name="chart.png")
    assert document == Document(data=b"%PDF", media_type="application/pdf", name="report.pdf")
    assert csv == Document(data=b"a,b", media_type="text/csv", name="artifact")
    assert reference == Text(text="[artifact big.mp4 (video/mp4) is stored by the application and not included here]")
    assert "s3://" not in reference.text  # the application's reference is not the model's to see
    assert stored.metadata == {"size": 10} and not stored.inline


@pytest.mark.parametrize(
    "kwargs",
    [
        {"media_type": "text/plain"},
        {"media_type": "text/plain", "data": b"x", "reference": "s3://x"},
    ],
)
def test_artifact_needs_exactly_one_of_data_or_reference(kwargs):
    with pytest.raises(ValueError, match="either data .* or a reference"):
        Artifact(**kwargs)


def test_artifact_bytes_is_the_known_byte_count():
    """The spec's Artifact#bytes: the byte count when known, None for an unresolved artifact."""
    assert Artifact(data=b"a,b\n1,2\n", media_type="text/csv", name="report.csv").bytes == 8
    assert Artifact(data=b"", media_type="text/plain").bytes == 0
    assert Artifact.deferred(reference={"file_id": "f-1"}, media_type="application/pdf").bytes is None
    assert typing.get_type_hints(Artifact)["data"] == bytes | None  # the property shadows nothing


def test_deferred_artifact_keeps_metadata_as_given():
    artifact = Artifact.deferred(
        reference={"file_id": "file-481"},
        media_type="application/pdf",
        name="report.pdf",
        metadata={"owner": "acct-1", "tags": ["a", {"b": 1}]},
    )
    assert artifact.metadata == {"owner": "acct-1", "tags": ("a", {"b": 1})}
    assert artifact.reference == {"file_id": "file-481"}
    assert not artifact.inline
    assert Artifact.deferred("r", "text/plain").metadata == {}

    class ExportTool(Tool):
        description = "d"

        def call(self, input):
            return Tool.Result(value="ok", artifacts=[artifact])

    assert ExportTool().execute({}).content[1] == Text(
        text="[artifact report.pdf (application/pdf) is stored by the application and not included here]"
    )


def test_artifact_metadata_and_reference_are_deeply_frozen():
    metadata = {"owner": "acct-1", "nested": {"k": [1, 2]}}
    artifact = Artifact(data=b"x", media_type="text/plain", metadata=metadata)
    metadata["owner"] = "changed"
    metadata["nested"]["k"].append(3)
    assert artifact.metadata == {"owner": "acct-1", "nested": {"k": (1, 2)}}
    with pytest.raises(TypeError):
        artifact.metadata["owner"] = "x"
    with pytest.raises(TypeError):
        artifact.metadata["nested"]["k"] = ()
    deferred = Artifact.deferred(reference={"id": 1}, media_type="text/plain")
    with pytest.raises(TypeError):
        deferred.reference["id"] = 2


def test_artifact_repr_hides_bytes_names_metadata_and_references():
    inline = Artifact(
        data=b"SECRETBYTES", media_type="image/png", name="alice-passport.png", metadata={"owner": "alice"}
    )
    deferred = Artifact.deferred(
        reference="s3://private/alice", media_type="application/pdf", name="alice.pdf", metadata={"owner": "alice"}
    )
    assert repr(inline) == "<Artifact inline image/png 11 bytes>"
    assert repr(deferred) == "<Artifact deferred application/pdf>"
    for text in (repr(inline), repr(deferred), str(inline), repr([deferred])):
        assert "SECRET" not in text and "alice" not in text


def test_artifacts_are_hashable_and_compare_all_fields():
    one = Artifact(data=b"x", media_type="image/png", name="a.png", metadata={"a": 1, "b": [1]})
    same = Artifact(data=bytearray(b"x"), media_type="image/png", name="a.png", metadata={"b": [1], "a": 1})
    assert one == same and hash(one) == hash(same)
    assert {one: 1}[same] == 1
    assert one != Artifact(data=b"x", media_type="image/png", name="a.png", metadata={"a": 2, "b": [1]})
    assert one != Artifact(data=b"y", media_type="image/png", name="a.png", metadata={"a": 1, "b": [1]})
    deferred = Artifact.deferred(reference={"file_id": "f"}, media_type="application/pdf")
    assert {deferred, Artifact.deferred(reference={"file_id": "f"}, media_type="application/pdf")} == {deferred}
    unhashable_leaf = Artifact(data=b"x", media_type="text/plain", metadata={"s": {1, 2}})
    assert hash(unhashable_leaf) == hash(Artifact(data=b"x", media_type="text/plain", metadata={"s": {2, 1}}))


@pytest.mark.parametrize("data", [bytearray(b"abc"), memoryview(b"abc"), b"abc"])
def test_artifact_data_accepts_bytes_like_values_as_bytes(data):
    artifact = Artifact(data=data, media_type="text/csv")
    assert artifact.data == b"abc" and type(artifact.data) is bytes


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"data": "a,b\n1,2", "media_type": "text/csv"}, "Artifact.data must be bytes.*encode"),
        ({"data": [1, 2], "media_type": "text/csv"}, "Artifact.data must be bytes"),
        ({"data": b"x", "media_type": None}, "media_type"),
        ({"data": b"x", "media_type": ""}, "media_type"),
        ({"data": b"x", "media_type": "text/csv", "name": 3}, "Artifact.name"),
        ({"data": b"x", "media_type": "text/csv", "metadata": [("a", 1)]}, "Artifact.metadata"),
    ],
)
def test_artifact_rejects_bad_fields_when_built(kwargs, message):
    with pytest.raises(TypeError, match=message):
        Artifact(**kwargs)


def test_tool_result_rejects_non_artifacts():
    with pytest.raises(TypeError, match="must be Artifact objects"):
        Tool.Result(value=1, artifacts=[{"data": b"x"}])


def test_a_return_value_that_cannot_become_content_is_an_unexpected_tool_error():
    class Unprintable:
        def __str__(self):
            raise RuntimeError("secret detail")

    class OddTool(Tool):
        description = "d"

        def call(self, input):
            return Unprintable()

    outcome = OddTool().execute({})
    assert not outcome.ok
    assert outcome.error_kind == "unexpected"
    assert outcome.text == "Tool 'odd' failed with an internal error (RuntimeError)."
    assert isinstance(outcome.error, RuntimeError)


def test_building_a_bad_artifact_inside_call_is_an_unexpected_tool_error():
    class CsvTool(Tool):
        description = "d"

        def call(self, input):
            return Tool.Result(value=1, artifacts=[Artifact(data="a,b", media_type="text/csv")])

    outcome = CsvTool().execute({})
    assert outcome.error_kind == "unexpected"
    assert "a,b" not in outcome.text


def test_async_call_works():
    class AsyncLookupTool(Tool):
        description = "d"
        input_schema = TOPIC_SCHEMA

        async def call(self, input):
            await asyncio.sleep(0)
            return {"topic": input["topic"]}

    outcome = AsyncLookupTool().execute({"topic": "refunds"})
    assert outcome.ok and outcome.value == {"topic": "refunds"}
    assert AsyncLookupTool().execute({}).error_kind == "validation"


def test_async_tool_error_is_kept():
    class AsyncRefusingTool(Tool):
        description = "d"

        async def call(self, input):
            raise ToolError("no access")

    assert AsyncRefusingTool().execute({}).text == "no access"


# -- Tool.define ---------------------------------------------------------------------------


def test_define_builds_a_tool_class():
    Echo = Tool.define(
        "echo",
        "Echo text.",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        lambda input: input["text"],
    )
    assert issubclass(Echo, Tool)
    assert Echo.tool_name == "echo"
    assert Echo.description == "Echo text."
    assert Echo().execute({"text": "hi"}).text == "hi"
    assert Echo().execute({}).error_kind == "validation"


def test_define_passes_context_when_the_implementation_accepts_it():
    Ctx = Tool.define("ctx", "d", None, lambda input, context: f"{input.get('x')}/{context}")
    assert Ctx.specification().input_schema == {"type": "object"}
    assert Tool.define("empty", "d", {}, lambda input: 1).specification().input_schema == {"type": "object"}
    assert Ctx().execute({"x": 1}, context="ctx-1").text == "1/ctx-1"


def test_define_accepts_extra_class_attributes():
    Once = Tool.define("charge_card", "Charge.", None, lambda input: "charged", at_most_once=True, exclusive=True)
    assert Once.at_most_once is True and Once.exclusive is True
    assert Tool.at_most_once is False


def test_define_takes_a_pydantic_input_model_like_the_class_form():
    class EchoInput(BaseModel):
        text: str

    Echo = Tool.define("echo", "Echo text.", EchoInput, lambda input: f"{type(input).__name__}: {input.text}")

    assert Echo.specification().input_schema["required"] == ("text",)
    assert Echo().execute({"text": "hi"}).text == "EchoInput: hi"
    assert Echo().execute({}).error_kind == "validation"


@pytest.mark.parametrize("schema", [[1], "object", 5])
def test_define_refuses_a_schema_that_is_neither_a_mapping_nor_a_pydantic_model(schema):
    with pytest.raises(ConfigurationError, match=r"input_schema must be a dict or a Pydantic model, got "):
        Tool.define("echo", "Echo text.", schema, lambda input: input)


def test_define_with_async_implementation_awaits_it():
    async def implementation(input):
        await asyncio.sleep(0)
        return "awaited"

    Later = Tool.define("later", "d", None, implementation)
    assert Later().execute({}).text == "awaited"


@pytest.mark.parametrize("implementation", [None, "not callable"])
def test_define_needs_an_implementation(implementation):
    with pytest.raises(ConfigurationError, match="Tool.define needs an implementation callable"):
        Tool.define("x", "d", None, implementation)


@pytest.mark.parametrize(
    ("name", "schema", "match"),
    [
        ("bad name", None, "tool_name 'bad name' must be"),
        ("ok", {"type": "array"}, "must describe an object"),
    ],
)
def test_define_validates_like_a_class(name, schema, match):
    with pytest.raises(ConfigurationError, match=match):
        Tool.define(name, "d", schema, lambda input: None)


# -- availability and binding ------------------------------------------------------------------


class AdminOnlyTool(Tool):
    description = "Admin tool."
    available_if = lambda binding: binding.agent == "admin"  # noqa: E731

    def call(self, input):
        return f"agent={self.agent}"


def test_available_if_checks_the_binding():
    assert AdminOnlyTool.available(Binding(agent="admin"))
    assert not AdminOnlyTool.available(Binding(agent="guest"))
    assert HelpCenterLookupTool.available(Binding())


def test_available_if_as_a_function_definition():
    class FlaggedTool(Tool):
        description = "d"

        def available_if(binding):  # noqa: N805 - a predicate of the binding
            return binding.workspace is not None

    assert FlaggedTool.available(Binding(workspace="/w"))
    assert not FlaggedTool.available(Binding())


def test_an_async_available_if_is_awaited():
    """Its coroutine was truthy: a tool whose predicate said no was offered anyway."""

    class AsyncAdminTool(Tool):
        description = "d"

        async def available_if(binding):  # noqa: N805 - a predicate of the binding
            await asyncio.sleep(0)
            return binding.agent == "admin"

        def call(self, input):
            return "x"

    assert AsyncAdminTool.available(Binding(agent="admin"))
    assert not AsyncAdminTool.available(Binding(agent="guest"))
    assert ToolRegistry([AsyncAdminTool], binding=Binding(agent="guest")).names == []


@pytest.mark.parametrize("bad", [True, "admin", 1])
def test_non_callable_available_if_fails_at_class_definition(bad):
    with pytest.raises(ConfigurationError, match="available_if must be a function of the binding"):

        class BadPredicateTool(Tool):
            description = "d"
            available_if = bad


def test_binding_is_exposed_on_the_tool():
    binding = Binding(agent="a", run="r", runtime="rt", model="m", workspace="w", sandbox="s", idempotency_key="k")
    tool = HelpCenterLookupTool(binding=binding)
    assert (
        tool.agent,
        tool.run,
        tool.runtime,
        tool.model,
        tool.workspace,
        tool.sandbox,
        tool.idempotency_key,
    ) == (
        "a",
        "r",
        "rt",
        "m",
        "w",
        "s",
        "k",
    )
    assert HelpCenterLookupTool().binding == Binding()


def test_binding_with_and_build():
    binding = Binding(agent="a")
    changed = binding.with_(run="r")
    assert changed.agent == "a" and changed.run == "r" and binding.run is None
    tools = binding.build(HelpCenterLookupTool, AdminOnlyTool)
    assert [type(t) for t in tools] == [HelpCenterLookupTool, AdminOnlyTool]
    assert all(t.binding is binding for t in tools)


# -- ToolRegistry ------------------------------------------------------------------------------


class OrderStatusTool(Tool):
    description = "Order status."

    def call(self, input):
        return "shipped"


class AccountTools:
    """A provider: decides per binding which tools exist."""

    @classmethod
    def tools(cls, binding):
        if binding.agent == "none":
            return None
        extra = [AdminOnlyTool] if binding.agent == "admin" else []
        return [OrderStatusTool, [extra, None]]


def test_registry_flattens_classes_instances_lists_and_providers():
    instance = HelpCenterLookupTool()
    binding = Binding(agent="admin")
    registry = ToolRegistry([instance, [AccountTools, None]], binding=binding)
    assert registry.names == ["help_center_lookup", "order_status", "admin_only"]
    assert len(registry) == 3
    assert "order_status" in registry and "nope" not in registry
    assert registry.fetch("help_center_lookup") is instance
    assert registry.fetch("order_status").binding is binding
    assert registry.fetch("admin_only").execute({}).text == "agent=admin"


def test_registry_provider_sees_the_binding():
    assert ToolRegistry([AccountTools], binding=Binding(agent="guest")).names == ["order_status"]
    assert ToolRegistry([AccountTools], binding=Binding(agent="none")).names == []


def test_registry_provider_may_return_instances_or_a_single_class():
    class InstanceProvider:
        @staticmethod
        def tools(binding):
            return OrderStatusTool(binding=binding)

    class ClassProvider:
        @classmethod
        def tools(cls, binding):
            return HelpCenterLookupTool

    registry = ToolRegistry([InstanceProvider, ClassProvider])
    assert registry.names == ["order_status", "help_center_lookup"]


def test_registry_drops_unavailable_tool_classes_before_building_them():
    built = []

    class CountingTool(Tool):
        description = "d"
        available_if = lambda binding: binding.agent == "yes"  # noqa: E731

        def __init__(self, binding=None):
            built.append(True)
            super().__init__(binding)

    assert ToolRegistry([CountingTool], binding=Binding(agent="no")).names == []
    assert built == []
    assert ToolRegistry([CountingTool], binding=Binding(agent="yes")).names == ["counting"]
    assert built == [True]


def test_registry_specifications():
    registry = ToolRegistry([HelpCenterLookupTool, OrderStatusTool])
    assert [s.name for s in registry.specifications()] == ["help_center_lookup", "order_status"]
    assert [t.tool_name for t in registry] == ["help_center_lookup", "order_status"]


def test_duplicate_names_are_rejected_naming_both_classes():
    class OtherLookupTool(Tool):
        tool_name = "help_center_lookup"
        description = "d"

    with pytest.raises(
        ConfigurationError,
        match=r"two tools are named 'help_center_lookup'.*OtherLookupTool.*set tool_name",
    ):
        ToolRegistry([HelpCenterLookupTool, OtherLookupTool])


def test_an_agent_whose_subclass_adds_a_tool_of_an_inherited_name_fails_when_defined():
    """Tools add up across inheritance, so the pair failed the first step of every run instead."""

    class OtherLookupTool(Tool):
        tool_name = "help_center_lookup"
        description = "d"

        def call(self, input):
            return "other entry"

    class Base(Agent):
        model = "scripted:unused"
        tools = [HelpCenterLookupTool]

    with pytest.raises(
        ConfigurationError,
        match=r"Child.tools has two tools named 'help_center_lookup': HelpCenterLookupTool and .*OtherLookupTool",
    ):

        class Child(Base):
            tools = [OtherLookupTool]


@pytest.mark.parametrize("misspelled", [None, "cal", "__call__"])
def test_an_agent_declaring_a_tool_without_call_fails_at_class_definition(misspelled):
    """Each call told the model "internal error" and the run still completed."""
    namespace = {"description": "d"}
    if misspelled is not None:
        namespace[misspelled] = lambda self, input: "never called"
    UnfinishedTool = type("UnfinishedTool", (Tool,), namespace)

    with pytest.raises(
        ConfigurationError,
        match=r"UnfinishedAgent\.tools: UnfinishedTool \(tool 'unfinished'\) .*must define call\(self, input\)",
    ):
        type("UnfinishedAgent", (Agent,), {"model": "scripted:unused", "tools": [UnfinishedTool]})


def test_abstract_tool_bases_and_defined_tools_stay_allowed():
    class AuditedTool(Tool):  # an abstract base: never declared in an agent's tools
        description = "Audited."

    class AuditedLookupTool(AuditedTool):
        def call(self, input):
            return "found"

    Defined = Tool.define("defined", "Defined.", None, lambda input: "ok")

    class AuditingAgent(Agent):
        model = "scripted:unused"
        tools = [AuditedLookupTool, Defined]

    assert [tool.tool_name for tool in AuditingAgent.tools] == ["audited_lookup", "defined"]


def test_a_provider_returning_a_tool_without_call_fails_the_run_naming_it():
    """A provider's tools escape the class-definition check: the model was told "internal error"."""
    UnfinishedTool = type("UnfinishedTool", (Tool,), {"description": "d"})

    class UnfinishedProvider:
        @classmethod
        def tools(cls, binding):
            return [UnfinishedTool]

    scripted.register(
        "provider-unfinished", [{"tool_calls": [{"name": "unfinished", "arguments": {}}]}, {"text": "done"}]
    )

    class ProvidedAgent(Agent):
        model = "scripted:provider-unfinished"
        tools = [UnfinishedProvider]

    try:
        run = ProvidedAgent.ask("go")
    finally:
        scripted.unregister("provider-unfinished")
    assert run.failed
    assert isinstance(run.error, ConfigurationError)
    assert "returned UnfinishedTool (tool 'unfinished'), which does not implement the tool" in str(run.error)


def test_the_same_class_twice_is_a_duplicate():
    with pytest.raises(ConfigurationError, match="two tools are named 'order_status'"):
        ToolRegistry([OrderStatusTool, AccountTools])


def test_missing_description_is_rejected():
    class SilentTool(Tool):
        def call(self, input):
            return "x"

    with pytest.raises(ConfigurationError, match=r"tool 'silent' \(.*SilentTool\) needs a description"):
        ToolRegistry([SilentTool])


@pytest.mark.parametrize("bad", ["a string", 5, object()])
def test_provider_returning_garbage_is_rejected(bad):
    class GarbageProvider:
        @classmethod
        def tools(cls, binding):
            return bad

    with pytest.raises(ConfigurationError, match="expected Tool classes, instances, lists or None"):
        ToolRegistry([GarbageProvider])


def test_fetch_unknown_tool_lists_available_tools():
    registry = ToolRegistry([HelpCenterLookupTool, OrderStatusTool])
    with pytest.raises(
        ToolError,
        match=r"Unknown tool 'refund'\. Available tools: help_center_lookup, order_status\.",
    ):
        registry.fetch("refund")
    with pytest.raises(ToolError, match="Available tools: none"):
        ToolRegistry().fetch("x")


def _closing_tools(log, fail=()):
    def make(label):
        class ClosingTool(Tool):
            tool_name = label
            description = "d"

            def call(self, input):
                return label

            def close(self):
                log.append(label)
                if label in fail:
                    raise RuntimeError(f"{label} would not close")

        return ClosingTool

    return [make(label) for label in ("first", "second", "third")]


def test_close_runs_in_reverse_order_once():
    log = []
    registry = ToolRegistry(_closing_tools(log))
    registry.close()
    assert log == ["third", "second", "first"]
    registry.close()
    assert log == ["third", "second", "first"]


def test_close_runs_every_closer_and_raises_the_first_failure():
    log = []
    registry = ToolRegistry(_closing_tools(log, fail=("third", "first")))
    with pytest.raises(CleanupError, match="third would not close") as info:
        registry.close()
    assert log == ["third", "second", "first"]
    assert isinstance(info.value.__cause__, RuntimeError)


def test_close_leaves_instances_it_did_not_create_alone():
    log = []
    (first_cls, second_cls, _) = _closing_tools(log)
    direct = first_cls()
    registry = ToolRegistry([direct, second_cls], binding=Binding(agent="a"))
    registry.close()
    assert log == ["second"]
    assert direct.binding == Binding(), "an instance passed directly stays the caller's, unbound"


def test_provider_instances_are_bound_to_the_registry_and_closed_once():
    log = []
    first_cls, second_cls, third_cls = _closing_tools(log)
    own_binding = Binding(agent="provider's own")
    unbound, prebound, derived = first_cls(), second_cls(), third_cls(binding=own_binding)

    class InstanceProvider:
        @classmethod
        def tools(cls, binding):
            prebound.binding = binding
            return [unbound, [prebound, None], derived]

    binding = Binding(agent="admin")
    registry = ToolRegistry([InstanceProvider], binding=binding)
    assert unbound.binding is binding
    assert prebound.binding is binding
    assert derived.binding is own_binding, "a binding the provider chose is kept"
    registry.close()
    registry.close()
    assert log == ["third", "second", "first"]


def test_a_failing_registry_closes_the_tools_it_already_built_or_adopted():
    log = []
    first_cls, second_cls, _ = _closing_tools(log)

    class DuplicateProvider:
        @classmethod
        def tools(cls, binding):
            return [second_cls(), first_cls()]

    with pytest.raises(ConfigurationError, match="two tools are named 'first'"):
        ToolRegistry([first_cls, DuplicateProvider])
    assert log == ["first", "second", "first"], "the rejected duplicate too, each once, in reverse"


# -- definition errors a run would only meet at every call -------------------------------------------


def test_input_that_is_not_a_pydantic_model_fails_at_class_definition():
    with pytest.raises(
        ConfigurationError, match=r"DictInputTool.Input must be a Pydantic model class, got \{'type': 'object'\}"
    ):

        class DictInputTool(Tool):
            Input = {"type": "object"}  # type: ignore[assignment]

            def call(self, input):
                return "ok"


def test_an_input_model_without_a_json_schema_fails_at_class_definition():
    class CallbackInput(BaseModel):
        on_done: typing.Callable[[], None]

    with pytest.raises(
        ConfigurationError, match=r"input model \S*CallbackInput has no JSON Schema: Cannot generate a JsonSchema"
    ):

        class CallbackTool(Tool):
            input_schema = CallbackInput

            def call(self, input):
                return "ok"


@pytest.mark.parametrize(
    "call",
    [lambda self: "no input parameter", "ok", staticmethod(lambda: "no input")],
    ids=["no input parameter", "not callable", "static without input"],
)
def test_a_call_that_cannot_take_the_input_fails_at_class_definition(call):
    with pytest.raises(
        ConfigurationError, match=r"BrokenTool.call must be a method taking the input, `def call\(self, input\)`"
    ):
        type("BrokenTool", (Tool,), {"description": "d", "call": call})


def test_call_forms_that_take_the_input_are_accepted():
    assert type("KeywordTool", (Tool,), {"call": lambda self, input, context=None: "ok"})().execute({}).text == "ok"
    assert type("StaticTool", (Tool,), {"call": staticmethod(lambda input: "ok")})().execute({}).text == "ok"
    assert type("StarTool", (Tool,), {"call": lambda *args: "ok"})().execute({}).text == "ok"


def test_a_method_style_available_if_fails_at_class_definition():
    with pytest.raises(
        ConfigurationError,
        match=(
            r"SlackTool.available_if must be a function of the binding alone, "
            r"`def available_if\(binding\): ...` \(no self\)"
        ),
    ):

        class SlackTool(Tool):
            def available_if(self, binding):
                return True

            def call(self, input):
                return "ok"


def test_declaring_both_input_and_input_schema_fails_at_class_definition():
    """Only Input was used, so the model was offered another schema than the one written beside it."""

    class Query(BaseModel):
        topic: str

    with pytest.raises(ConfigurationError, match="BothTool declares both Input and input_schema; keep one"):

        class BothTool(Tool):
            input_schema = {"type": "object", "properties": {"order_id": {"type": "integer"}}}
            Input = Query

            def call(self, input):
                return "ok"


# -- declarations nothing would enforce ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"), [("sandbox", {"network": "none", "files": ["/tmp"]}), ("workspace", "/srv/tickets")]
)
def test_a_tool_declaring_a_sandbox_or_workspace_fails_because_the_runs_comes_from_the_settings(name, value):
    with pytest.raises(
        ConfigurationError, match=f"ShellTool declares {name} = ..., but a tool's {name} is its run's, built from"
    ):
        type("ShellTool", (Tool,), {"description": "Run a command.", name: value, "call": lambda self, input: "ran"})


def test_tool_define_refuses_a_sandbox_declaration_too():
    with pytest.raises(ConfigurationError, match="a tool's sandbox is its run's"):
        Tool.define("shell", "Run a command.", implementation=lambda input: "ran", sandbox={"network": "none"})


@pytest.mark.parametrize("name", ["agent", "run", "runtime", "model", "idempotency_key"])
def test_a_class_attribute_hiding_a_binding_accessor_fails_at_class_definition(name):
    with pytest.raises(ConfigurationError, match=f"NotesTool.{name} would hide the tool's run-scoped {name}"):
        type("NotesTool", (Tool,), {"description": "Take notes.", name: "openai:gpt-4o"})


def test_a_tool_inheriting_from_one_that_hides_nothing_keeps_its_bound_sandbox():
    """The accessor still reads the binding: what a sandbox delegation would use once sandboxes exist."""

    class ReadTool(Tool):
        description = "Read a file."

    class ReadTwiceTool(ReadTool):
        description = "Read a file twice."

    tool = ReadTwiceTool(binding=Binding(sandbox="the run's sandbox", workspace="the run's workspace"))
    assert (tool.sandbox, tool.workspace) == ("the run's sandbox", "the run's workspace")


def test_an_accessor_written_as_a_property_is_accepted():
    class AuditedTool(Tool):
        description = "Audit."

        @property
        def model(self):
            return f"audited {self.binding.model}"

    assert AuditedTool(binding=Binding(model="m")).model == "audited m"
