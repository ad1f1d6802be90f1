"""The model-facing instructions for code mode: how to write a program, and the tool catalog.

They describe only what the runtime implements (:mod:`lg_core.code_mode._runtime`)
and the session's observation window, so the model is never told of a name or a
behaviour that does not exist.
"""

from __future__ import annotations

from lg_core.code_mode.catalog import Catalog

_USAGE = """\
You can run Python programs with the `exec` tool ({{"code": "..."}}). Each program starts in a fresh
interpreter with an empty temporary directory: variables and files do not carry over to the next exec.
Inside a program:
- call a tool as a function: `tools.<function>(argument=value, ...)` (keyword arguments only);
- `tools.call(name, arguments)` calls a tool whose name is computed (its name or "tools.<function>");
- `tools.parallel(lambda: ..., lambda: ...)` runs independent calls concurrently and returns their results in order;
- `ALL_TOOLS` lists the tools (name, function, description, signature);
- `text(value)` (or print) adds output for the conversation;
- the value of the last expression is the program's result; `finish(value)` returns early.
JSON tool results arrive as dicts, lists, strings, numbers, booleans or None. A failed tool call raises
ToolCallError inside the program with the tool's message; catch it to handle the failure.
If the program is still running after {window} seconds, exec returns status "still_working": call `wait`
to watch it again (it returns only new output) or `stop` to end it. "completed", "error" and "terminated"
are final.

The tools available to programs:

"""


def instructions(catalog: Catalog, observation_seconds: float = 60.0) -> str:
    """The usage notes and every tool's Python signature and docstring."""
    window = f"{observation_seconds:g}"
    return _USAGE.format(window=window) + (catalog.rendered() or "(none)")


__all__ = ["instructions"]
