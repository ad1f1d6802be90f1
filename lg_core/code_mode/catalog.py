"""Catalog: the agent's tools as Python functions a code-mode program can call.

Each tool's model-visible name becomes a function name on ``tools`` (characters
that are not allowed in a Python identifier become ``_``), and its input schema
becomes a keyword-only signature with a docstring, shown to the model in the
instructions. Names that would shadow the code-mode controls or the ``tools``
object's own methods, and names that collide once normalized, are refused, so
a program can never reach a tool other than the one its name shows.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lg_core.errors import ConfigurationError

RESERVED = frozenset({"exec", "wait", "stop", "call", "parallel"})
_JSON_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list[Any]",
    "object": "dict[str, Any]",
    "null": "None",
}


@dataclass(frozen=True)
class Definition:
    """One tool as a program sees it."""

    name: str
    function: str
    description: str
    input_schema: Mapping[str, Any]

    @property
    def signature(self) -> str:
        """``def function(*, a: str, b: int | None = None) -> Any`` for the instructions."""
        properties = dict(self.input_schema.get("properties") or {})
        required = set(self.input_schema.get("required") or ())
        parameters = []
        for key, schema in properties.items():
            annotation = _annotation(schema)
            if key in required:
                parameters.append(f"{key}: {annotation}")
            else:
                parameters.append(f"{key}: {annotation} | None = None")
        arguments = "*, " + ", ".join(parameters) if parameters else ""
        return f"def {self.function}({arguments}) -> Any"

    def rendered(self) -> str:
        """The signature and docstring shown to the model."""
        description = self.description.replace('"""', "'''").strip() or "(no description)"
        return f'{self.signature}:\n    """{description}"""'

    def to_dict(self) -> dict[str, Any]:
        """The entry a program finds in ``ALL_TOOLS``."""
        return {
            "name": self.name,
            "function": self.function,
            "description": self.description,
            "signature": self.signature,
        }


class Catalog:
    """Normalized tool definitions in declaration order; see the module docstring."""

    def __init__(self, specifications: Iterable[Any], reserved: Iterable[str] = RESERVED) -> None:
        reserved_names = frozenset(reserved)
        definitions: dict[str, Definition] = {}
        functions: dict[str, str] = {}
        for specification in specifications:
            name = str(specification.name)
            function = python_name(name)
            if name in reserved_names or function in reserved_names:
                raise ConfigurationError(f"tool {name!r} would shadow the code-mode name {function!r}; rename it")
            if function in functions:
                raise ConfigurationError(
                    f"tools {functions[function]!r} and {name!r} both become tools.{function} in code mode"
                )
            functions[function] = name
            definitions[name] = Definition(
                name=name,
                function=function,
                description=str(specification.description or ""),
                input_schema=dict(specification.input_schema or {}),
            )
        self.definitions: tuple[Definition, ...] = tuple(definitions.values())
        self._by_name = definitions

    def fetch(self, name: str) -> Definition:
        """The definition for model-visible ``name``; KeyError when it is not in the catalog."""
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def names(self) -> list[str]:
        return list(self._by_name)

    def to_list(self) -> list[dict[str, Any]]:
        """``ALL_TOOLS`` as the runtime receives it."""
        return [definition.to_dict() for definition in self.definitions]

    def rendered(self) -> str:
        """Every function's signature and docstring, for the model's instructions."""
        return "\n\n".join(definition.rendered() for definition in self.definitions)


def python_name(name: str) -> str:
    """``name`` as a Python identifier: invalid characters become ``_``; a keyword gets a trailing ``_``.

    A name not starting with a letter gets the prefix ``tool_``.
    """
    function = re.sub(r"\W", "_", name, flags=re.ASCII)
    if not function[:1].isalpha():  # a leading "_" would name the tools object's own attributes
        function = "tool_" + function.lstrip("_")
    if keyword.iskeyword(function):
        function += "_"
    return function


def _annotation(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return "Any"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_JSON_TYPES.get(str(k), "Any") for k in kind) or "Any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return "Literal[" + ", ".join(repr(v) for v in schema["enum"]) + "]"
    return _JSON_TYPES.get(str(kind), "Any")


__all__ = ["RESERVED", "Catalog", "Definition", "python_name"]
