"""JSON Schema as Gemini's OpenAPI-subset Schema: what converts, what is left out, and what is refused."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from lg_core import ConfigurationError
from lg_core.providers.gemini._schema import gemini_schema


def convert(schema):
    return gemini_schema(schema, "tool 'lookup'")


def test_types_become_enum_names_and_a_null_in_a_type_list_becomes_nullable():
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "description": "Customer name."},
            "age": {"type": ["integer", "null"], "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
            "score": {"type": "number", "format": "double"},
            "vip": {"type": "boolean"},
        },
        "required": ["name", "age"],
    }

    assert convert(schema) == {
        "type": "OBJECT",
        "properties": {
            "name": {"type": "STRING", "minLength": 1, "description": "Customer name."},
            "age": {"type": "INTEGER", "minimum": 0, "nullable": True},
            "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "maxItems": 5},
            "score": {"type": "NUMBER", "format": "double"},
            "vip": {"type": "BOOLEAN"},
        },
        "required": ["name", "age"],
    }


def test_narrowing_keywords_gemini_lacks_and_annotations_are_left_out():
    """They are checked here against the full schema, and a failing value is reported to the model."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "ids": {
                "type": "array",
                "items": {"type": "integer", "multipleOf": 2, "exclusiveMinimum": 0},
                "uniqueItems": True,
            },
            "note": {"type": "string", "examples": ["late"], "x-order": 3, "deprecated": False},
        },
        "additionalProperties": False,
    }

    assert convert(schema) == {
        "type": "OBJECT",
        "properties": {"ids": {"type": "ARRAY", "items": {"type": "INTEGER"}}, "note": {"type": "STRING"}},
    }


def test_required_names_that_are_not_properties_are_left_out():
    """Gemini refuses a required name without a property."""
    assert convert({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]})["required"] == [
        "a"
    ]


def test_const_and_string_enums_become_enums_and_a_null_value_makes_them_nullable():
    schema = {"type": "object", "properties": {"kind": {"const": "refund"}, "tier": {"enum": ["gold", "silver", None]}}}

    assert convert(schema)["properties"] == {
        "kind": {"type": "STRING", "enum": ["refund"]},
        "tier": {"type": "STRING", "enum": ["gold", "silver"], "nullable": True},
    }


def test_one_of_becomes_any_of_and_a_null_alternative_becomes_nullable():
    schema = {
        "anyOf": [{"type": "string"}, {"type": "null"}],
        "description": "An optional note.",
    }
    choice = {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}

    assert convert(schema) == {"description": "An optional note.", "nullable": True, "type": "STRING"}
    assert convert(choice) == {"nullable": True, "anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}


class Address(BaseModel):
    street: str
    city: str


class Order(BaseModel):
    """An order to look up."""

    order_id: str = Field(description="The order's id.")
    shipping: Address
    billing: Address | None = None
    priority: Literal["low", "high"] = "low"


def test_a_pydantic_models_references_are_inlined_with_their_descriptions():
    converted = convert(Order.model_json_schema())

    address = {
        "type": "OBJECT",
        "title": "Address",
        "properties": {"street": {"type": "STRING", "title": "Street"}, "city": {"type": "STRING", "title": "City"}},
        "required": ["street", "city"],
    }
    assert converted["properties"]["order_id"] == {
        "type": "STRING",
        "title": "Order Id",
        "description": "The order's id.",
    }
    assert converted["properties"]["shipping"] == address
    assert converted["properties"]["billing"] == {**address, "default": None, "nullable": True}
    assert converted["properties"]["priority"] == {
        "type": "STRING",
        "title": "Priority",
        "enum": ["low", "high"],
        "default": "low",
    }
    assert converted["required"] == ["order_id", "shipping"]


def test_a_one_schema_all_of_is_merged_into_its_parent():
    schema = {
        "$defs": {"Id": {"type": "string", "pattern": "^A-"}},
        "allOf": [{"$ref": "#/$defs/Id"}],
        "description": "An order id.",
    }

    assert convert(schema) == {"type": "STRING", "pattern": "^A-", "description": "An order id."}


class Category(BaseModel):
    name: str
    children: list[Category] = []


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (
            Category.model_json_schema(),
            r"at /properties/children/items, the schema is recursive \(#/\$defs/Category refers to itself\)",
        ),
        (
            {"type": "object", "properties": {"id": {"type": ["string", "integer"]}}},
            r"at /properties/id/type, a value of several types \['string', 'integer'\]",
        ),
        (
            {"type": "object", "properties": {"size": {"enum": [1, 2, 3]}}},
            r"at /properties/size/enum, Gemini takes enum values only as strings",
        ),
        (
            {"type": "object", "properties": {"on": {"const": True}}},
            r"at /properties/on/const, Gemini takes enum values only as strings",
        ),
        (
            {
                "type": "object",
                "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}},
            },
            r"at /properties/labels/additionalProperties, an object whose extra properties have a schema",
        ),
        (
            {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
            r"at /, keyword 'patternProperties' has no equivalent",
        ),
        ({"allOf": [{"type": "object"}, {"required": ["a"]}]}, r"at /allOf, allOf of several schemas"),
        ({"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}, r"at /items, tuple validation"),
        ({"$ref": "https://example.test/order.json"}, r"at /, only references into the schema itself"),
        ({"$ref": "#/$defs/Missing"}, r"at /, reference '#/\$defs/Missing' points at nothing"),
        ({"type": "decimal"}, r"at /type, unknown type 'decimal'"),
    ],
)
def test_what_gemini_cannot_express_is_refused_naming_the_owner_and_the_path(schema, problem):
    with pytest.raises(ConfigurationError, match=rf"^tool 'lookup' cannot be sent to Gemini: {problem}"):
        convert(schema)
