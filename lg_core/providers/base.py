"""The provider interface: one connection, one wire API.

A provider turns a ModelRequest into StreamEvents. The last event is
``message_stop`` carrying the ModelResponse in ``data["response"]``. Errors are
raised as ProviderError subclasses (mapped from the transport in one place per
provider, so the rest of the code sees one error hierarchy).
"""

from __future__ import annotations

import abc
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from lg_core.content import ToolUse
from lg_core.datamap import MAX_JSON_DEPTH, nests_deeper_than
from lg_core.errors import MalformedToolCallError
from lg_core.events import StreamEvent
from lg_core.models.request import ModelCapabilities, ModelRequest


class Provider(abc.ABC):
    """A configured connection to one model API."""

    adapter: ClassVar[str]

    def __init__(self, connection: str, options: Mapping[str, Any] | None = None) -> None:
        self.connection = connection
        self.options = dict(options or {})

    @abc.abstractmethod
    def capabilities(self, model_id: str) -> ModelCapabilities:
        """What ``model_id`` supports, for strategy selection."""

    @abc.abstractmethod
    def stream(self, request: ModelRequest, model_id: str) -> Iterator[StreamEvent]:
        """Stream one response for ``request``."""

    def close(self) -> None:  # noqa: B027 - optional hook: providers without connections keep this no-op
        """Release connections; the runtime calls it when it is discarded."""


def tool_input(name: str, arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the tool's input: a JSON object, given as text or already decoded.

    Every provider applies the same rule, so a model's malformed call fails the same way
    (MalformedToolCallError, a provider error that ``after_model_error`` callbacks see)
    whichever wire API it came over. Arguments nested more than MAX_JSON_DEPTH levels
    are malformed too: stored as they came, they failed the step's commit.
    """
    if isinstance(arguments, str):
        text = arguments.strip()
        try:
            arguments = json.loads(text) if text else {}
        except (json.JSONDecodeError, RecursionError):
            raise MalformedToolCallError(f"tool call {name!r} has arguments that are not JSON: {text[:80]!r}") from None
    if not isinstance(arguments, Mapping):
        raise MalformedToolCallError(
            f"tool call {name!r} has {type(arguments).__name__} arguments; tool input must be a JSON object"
        )
    if nests_deeper_than(arguments):
        raise MalformedToolCallError(f"tool call {name!r} has arguments nested more than {MAX_JSON_DEPTH} levels deep")
    return dict(arguments)


def tool_use(call_id: str, name: str, arguments: Any) -> ToolUse:
    """The ToolUse of a model's call, its arguments decoded by :func:`tool_input`.

    Python's json decodes ``NaN``, ``Infinity`` and ``-Infinity``, which JSON has no
    value for and no store or provider accepts back. Such a number is kept in the
    input as the text the model wrote, and the call carries ``input_error``: the
    model is told its input was invalid, as for a schema violation, and the run
    goes on (the number could not be stored, so a run would otherwise fail).
    """
    problems: list[str] = []
    arguments = _finite(tool_input(name, arguments), "input", problems)
    error = None
    if problems:
        error = "; ".join(problems[:5]) + " (JSON numbers are finite: send a number, or leave the field out)"
    return ToolUse(id=call_id, name=name, input=arguments, input_error=error)


def _finite(value: Any, path: str, problems: list[str]) -> Any:
    """``value`` with each non-finite float replaced by its JSON-like text; ``problems`` names where."""
    if isinstance(value, float) and not math.isfinite(value):
        text = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        problems.append(f"{path} is {text}, which is not a JSON number")
        return text
    if isinstance(value, Mapping):
        return {key: _finite(item, f"{path}.{key}", problems) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item, f"{path}[{index}]", problems) for index, item in enumerate(value)]
    return value


__all__ = ["Provider", "tool_input", "tool_use"]
