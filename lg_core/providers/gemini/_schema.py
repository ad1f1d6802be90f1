"""JSON Schema as Gemini's ``Schema``: the OpenAPI 3.0 subset that function declarations
(``parameters``) and structured output (``responseSchema``) take.

Tools and result schemas are JSON Schema; Gemini's Schema differs in ways that shape
this module:

* Types are enum names (``STRING``, ``OBJECT`` ...). A type list with ``null`` becomes
  the type and ``nullable: true``; a list of two real types cannot be expressed.
* There are no references: ``$ref`` into the schema's own ``$defs`` (what Pydantic
  writes for nested models) is inlined; a recursive schema cannot be expressed.
* ``oneOf`` becomes ``anyOf`` and ``const`` a one-value ``enum``; enum values must be
  strings.
* Keywords that only narrow what is valid and that Gemini has no field for
  (``additionalProperties: false``, ``uniqueItems``, ``multipleOf``, exclusive bounds)
  are left out: every tool input and structured result is validated against the full
  schema here anyway, and a model whose value fails is told what failed.
* Everything else Gemini cannot express (``not``, ``if``, ``patternProperties``, a
  typed map in ``additionalProperties`` ...) fails with a ConfigurationError naming
  the tool or result schema and the path, before any request is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lg_core.datamap import thaw
from lg_core.errors import ConfigurationError

TYPES = {
    "string": "STRING",
    "number": "NUMBER",
    "integer": "INTEGER",
    "boolean": "BOOLEAN",
    "array": "ARRAY",
    "object": "OBJECT",
    "null": "NULL",
}
# Keywords Gemini's Schema has under the same name and meaning.
COPIED = (
    "title",
    "description",
    "format",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minimum",
    "maximum",
    "default",
    "nullable",
)
# Left out: annotations, and narrowing keywords checked here against the full schema (see the module docstring).
DROPPED = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "$defs",
        "definitions",
        "examples",
        "example",
        "readOnly",
        "writeOnly",
        "deprecated",
        "uniqueItems",
        "multipleOf",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "contentEncoding",
        "contentMediaType",
        "additionalProperties",
    }
)
# Converted by this module rather than copied.
CONVERTED = frozenset({"type", "properties", "required", "items", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"})


def gemini_schema(schema: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """``schema`` as Gemini's Schema; ``owner`` names it in errors ("tool 'lookup'", "result schema 'triage'")."""
    plain = thaw(schema)
    return _Converter(plain, owner).convert(plain, "", ())


class _Converter:
    def __init__(self, root: Any, owner: str) -> None:
        self.root = root
        self.owner = owner

    def convert(self, schema: Any, path: str, refs: tuple[str, ...]) -> dict[str, Any]:
        """One schema and everything below it; ``refs`` are the references being inlined (to stop recursion)."""
        if schema is True or schema == {}:
            return {}
        if not isinstance(schema, Mapping):
            self.fail(path, f"a schema must be a JSON object, got {schema!r}")
        schema = self._merged(schema, path, refs)
        if isinstance(schema.get("$ref"), str):
            ref = schema["$ref"]
            siblings = {key: value for key, value in schema.items() if key != "$ref"}
            return self.convert({**self._resolve(ref, path, refs), **siblings}, path, (*refs, ref))
        self._check_keywords(schema, path)
        wire: dict[str, Any] = {key: schema[key] for key in COPIED if key in schema}
        self._type(schema, path, wire)
        self._enum(schema, path, wire)
        self._object(schema, path, refs, wire)
        if "items" in schema:
            if not isinstance(schema["items"], Mapping):
                self.fail(
                    f"{path}/items",
                    "tuple validation (a list of item schemas) cannot be expressed; use one item schema",
                )
            wire["items"] = self.convert(schema["items"], f"{path}/items", refs)
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                self._any_of(schema[keyword], f"{path}/{keyword}", refs, wire)
        return wire

    def _merged(self, schema: Mapping[str, Any], path: str, refs: tuple[str, ...]) -> Mapping[str, Any]:
        """A one-schema ``allOf`` (Pydantic's way of describing a referenced model) merged into its parent."""
        if "allOf" not in schema:
            return schema
        parts = schema["allOf"]
        if not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], Mapping):
            self.fail(f"{path}/allOf", "allOf of several schemas cannot be expressed; merge them into one schema")
        rest = {key: value for key, value in schema.items() if key != "allOf"}
        return {**parts[0], **rest}

    def _resolve(self, ref: str, path: str, refs: tuple[str, ...]) -> Any:
        if ref in refs:
            self.fail(
                path, f"the schema is recursive ({ref} refers to itself), which cannot be expressed without references"
            )
        if not ref.startswith("#/"):
            self.fail(path, f"only references into the schema itself (#/$defs/...) can be inlined, not {ref!r}")
        target: Any = self.root
        for token in ref[2:].split("/"):
            token = token.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or token not in target:
                self.fail(path, f"reference {ref!r} points at nothing in the schema")
            target = target[token]
        return target

    def _check_keywords(self, schema: Mapping[str, Any], path: str) -> None:
        for keyword in schema:
            if keyword in CONVERTED or keyword in COPIED or keyword in DROPPED or keyword.startswith("x-"):
                continue
            self.fail(path, f"keyword {keyword!r} has no equivalent in Gemini's schema")
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            self.fail(
                f"{path}/additionalProperties",
                "an object whose extra properties have a schema (a map) cannot be expressed; "
                "name its properties, or take a list of {key, value} objects instead",
            )

    def _type(self, schema: Mapping[str, Any], path: str, wire: dict[str, Any]) -> None:
        declared = schema.get("type")
        if declared is None:
            return
        names = declared if isinstance(declared, list) else [declared]
        real = [name for name in names if name != "null"]
        if len(real) > 1:
            self.fail(
                f"{path}/type", f"a value of several types {real} cannot be expressed; use anyOf of one schema per type"
            )
        name = real[0] if real else "null"
        if name not in TYPES:
            self.fail(f"{path}/type", f"unknown type {name!r}")
        wire["type"] = TYPES[name]
        if real and len(real) < len(names):
            wire["nullable"] = True

    def _enum(self, schema: Mapping[str, Any], path: str, wire: dict[str, Any]) -> None:
        if "enum" in schema:
            values, where = schema["enum"], f"{path}/enum"
        elif "const" in schema:
            values, where = [schema["const"]], f"{path}/const"
        else:
            return
        if not isinstance(values, list):
            self.fail(where, "enum must be a list of values")
        strings = [value for value in values if value is not None]
        if not all(isinstance(value, str) for value in strings):
            self.fail(where, f"Gemini takes enum values only as strings, got {values!r}; use string values")
        wire["enum"] = strings
        wire.setdefault("type", "STRING")
        if len(strings) < len(values):
            wire["nullable"] = True

    def _object(self, schema: Mapping[str, Any], path: str, refs: tuple[str, ...], wire: dict[str, Any]) -> None:
        properties = schema.get("properties")
        if properties is None:
            return
        if not isinstance(properties, Mapping):
            self.fail(f"{path}/properties", "properties must map names to schemas")
        wire["properties"] = {
            str(name): self.convert(sub, f"{path}/properties/{name}", refs) for name, sub in properties.items()
        }
        required = schema.get("required")
        if isinstance(required, list):  # Gemini refuses a required name that is not a property
            wire["required"] = [name for name in required if name in properties]

    def _any_of(self, branches: Any, path: str, refs: tuple[str, ...], wire: dict[str, Any]) -> None:
        """Alternatives; a ``null`` alternative becomes ``nullable``, and a single other one is merged in."""
        if not isinstance(branches, list) or not branches:
            self.fail(path, "alternatives must be a non-empty list of schemas")
        converted = [self.convert(branch, f"{path}/{index}", refs) for index, branch in enumerate(branches)]
        real = [branch for branch in converted if branch.get("type") != "NULL"]
        if len(real) < len(converted):
            wire["nullable"] = True
        if len(real) == 1:
            wire.update({key: value for key, value in real[0].items() if key not in wire})
        elif real:
            wire["anyOf"] = real

    def fail(self, path: str, problem: str) -> Any:
        where = path or "/"
        raise ConfigurationError(f"{self.owner} cannot be sent to Gemini: at {where}, {problem}")


__all__ = ["gemini_schema"]
