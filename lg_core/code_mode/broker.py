"""Broker: the trusted parent-side end of every tool call a code-mode program makes.

A program never runs a tool itself. Its ``tools.<name>(...)`` becomes a frame,
and the Broker (in the worker, beside the agent) checks the name against the
code-mode catalog, counts the call against the limit, and hands it to
``dispatch``, which runs it through the tool path a direct call takes. The
default dispatch validates the arguments against the tool's schema, converts
them for an ``Input`` model and calls the tool, turning failures into the
model-safe messages the tool path produces (a ToolError's message, otherwise
only the exception's class); an agent integration passes a dispatch that also
runs the agent's ``before_tool``/``after_tool`` callbacks and emits its events.
Only the result value or that message goes back to the program, so nothing of
the worker (credentials, environment, application objects) crosses over.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lg_core.code_mode.catalog import Catalog
from lg_core.tool import Tool, ToolOutcome

CONTROL_TOOLS = frozenset({"exec", "wait", "stop"})
Dispatch = Callable[[str, Mapping[str, Any]], ToolOutcome]


@dataclass(frozen=True)
class CallResult:
    """The answer to one brokered call: the decoded ``value``, or the model-safe ``error``."""

    id: str
    value: Any = None
    error: str | None = None


class Broker:
    """See the module docstring. Safe to call from several threads (``tools.parallel``)."""

    def __init__(
        self,
        registry: Any,
        context: Any = None,
        except_: Iterable[str] = (),
        dispatch: Dispatch | None = None,
        max_calls: int | None = None,
    ) -> None:
        excluded = CONTROL_TOOLS | frozenset(except_)
        self._registry = registry
        self._context = context
        self._dispatch = dispatch or self._execute
        self._max_calls = max_calls
        self._calls = 0
        self._program_calls = 0
        self._program_limit: int | None = None
        self._lock = threading.Lock()
        self.catalog = Catalog(spec for spec in registry.specifications() if spec.name not in excluded)

    @property
    def calls(self) -> int:
        """How many calls were admitted so far."""
        return self._calls

    def reset_calls(self, program_limit: int | None) -> None:
        """Start counting a new program's calls against ``program_limit`` (the agent-wide count goes on)."""
        with self._lock:
            self._program_calls, self._program_limit = 0, program_limit

    def call(self, name: str, arguments: Any = None, id: str | None = None) -> CallResult:
        """Run the catalog tool ``name`` with the (untrusted) ``arguments``."""
        call_id = id or str(uuid.uuid4())
        if not isinstance(name, str) or name not in self.catalog:
            return CallResult(call_id, error=f"no tool named {name!r} is available to this program")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            return CallResult(call_id, error=f"the arguments of {name!r} must be a JSON object")
        with self._lock:
            if self._max_calls is not None and self._calls >= self._max_calls:
                return CallResult(call_id, error=f"the agent reached its limit of {self._max_calls} tool calls")
            if self._program_limit is not None and self._program_calls >= self._program_limit:
                return CallResult(call_id, error=f"the program reached its limit of {self._program_limit} tool calls")
            self._calls += 1
            self._program_calls += 1
        outcome = self._dispatch(name, dict(arguments))
        if not outcome.ok:
            return CallResult(call_id, error=outcome.text or f"the call to {name!r} failed")
        return CallResult(call_id, value=program_value(outcome))

    def _execute(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        # A shallow copy per call: a tool keeps the running call's context on itself, and
        # tools.parallel may run the same tool twice at once.
        tool: Tool = copy.copy(self._registry.fetch(name))
        problems = tool.validate(arguments)
        if problems:
            return ToolOutcome.failure(f"Invalid input for tool {name!r}: " + "; ".join(problems[:5]), "validation")
        prepared = tool.prepare(arguments)
        if isinstance(prepared, ToolOutcome):
            return prepared
        return tool.execute_prepared(prepared, self._context)


def program_value(outcome: ToolOutcome) -> Any:
    """A successful outcome as a program value: JSON text decoded, JSON values kept, anything else as text."""
    value = outcome.value
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("{", "["):
            try:
                return json.loads(stripped)
            except ValueError:
                return value
        return value
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return outcome.text
    return value


__all__ = ["CONTROL_TOOLS", "Broker", "CallResult", "Dispatch", "program_value"]
