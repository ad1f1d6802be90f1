"""The three model-facing code-mode controls: ``exec``, ``wait`` and ``stop``, as the model sees them."""

from __future__ import annotations

from lg_core.models.request import ToolSpecification

EXEC, WAIT, STOP = "exec", "wait", "stop"
CONTROL_NAMES = frozenset({EXEC, WAIT, STOP})
_NO_INPUT = {"type": "object", "properties": {}, "additionalProperties": False}

CONTROL_SPECIFICATIONS: tuple[ToolSpecification, ...] = (
    ToolSpecification(
        EXEC,
        "Run a Python program that calls the tools listed in the instructions; returns its status, output and value.",
        {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The program's Python source."}},
            "required": ["code"],
            "additionalProperties": False,
        },
    ),
    ToolSpecification(WAIT, "Watch the running program for up to another minute; returns its new output.", _NO_INPUT),
    ToolSpecification(STOP, "Stop the running program; returns its last output.", _NO_INPUT),
)

__all__ = ["CONTROL_NAMES", "CONTROL_SPECIFICATIONS", "EXEC", "STOP", "WAIT"]
