"""Filesystem: read, list, write and replace files through the run's Sandbox.

Paths are logical: root-relative (``notes/today.md``) or ``workspace://name/path``.
The Sandbox's file operations refuse physical absolute paths, ``..`` out of a
path, paths it does not grant, symbolic links anywhere in a path, and files over
its size limits, with messages that name only the logical path; those are
ToolErrors the model reads. ``Filesystem.tools(binding)`` offers the mutation tools
only when the sandbox has a writable path, and a write to a read-only path is
still refused by the sandbox itself.

``Filesystem.Exclusive`` offers the same tools marked exclusive, so calls of one
turn run one after another and a batch never reads a file while another call of
that batch writes it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lg_core.tool import Binding, Tool
from lg_core.tools._sandboxed import SandboxedTool, required_sandbox

_PATH = {
    "type": "string",
    "minLength": 1,
    "description": "a root-relative path like notes/today.md, or workspace://name/path; never a host path",
}


class ReadFile(SandboxedTool):
    tool_name = "read_file"
    description = "Read one UTF-8 text file from the workspace."
    input_schema = {
        "type": "object",
        "properties": {"path": _PATH},
        "required": ["path"],
        "additionalProperties": False,
    }

    def call(self, input: dict[str, Any]) -> str:
        return str(self.sandbox.read(input["path"], self.context))


class ListFiles(SandboxedTool):
    tool_name = "list_files"
    description = (
        "List one directory of the workspace, one entry a line, directories ending in '/'. "
        "Without a path, the workspace root."
    )
    input_schema = {
        "type": "object",
        "properties": {"path": _PATH},
        "additionalProperties": False,
    }

    def call(self, input: dict[str, Any]) -> str:
        listing = str(self.sandbox.list(input.get("path", "."), self.context))
        return listing or "(empty directory)"


class WriteFile(SandboxedTool):
    tool_name = "write_file"
    description = "Write a UTF-8 text file in the workspace, replacing it if it exists (parent directories are made)."
    input_schema = {
        "type": "object",
        "properties": {"path": _PATH, "content": {"type": "string"}},
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def call(self, input: dict[str, Any]) -> str:
        written = self.sandbox.write(input["path"], input["content"], self.context)
        return f"Wrote {written} bytes to {input['path']}."


class ReplaceInFile(SandboxedTool):
    tool_name = "replace_in_file"
    description = (
        "Replace the one occurrence of old_text with new_text in a workspace file; "
        "refused when old_text occurs zero or several times."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": _PATH,
            "old_text": {"type": "string", "minLength": 1},
            "new_text": {"type": "string"},
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    }

    def call(self, input: dict[str, Any]) -> str:
        self.sandbox.replace(input["path"], input["old_text"], input["new_text"], self.context)
        return f"Replaced 1 occurrence in {input['path']}."


def _exclusive(tool: type[SandboxedTool]) -> type[SandboxedTool]:
    """``tool`` under the same name, marked exclusive."""
    return type(
        tool.__name__,
        (tool,),
        {"tool_name": tool.tool_name, "exclusive": True, "__qualname__": f"Filesystem.Exclusive.{tool.__name__}"},
    )


class Filesystem:
    """A tool provider: read_file and list_files always, write_file and replace_in_file when writable."""

    READ_TOOLS: ClassVar[tuple[type[Tool], ...]] = (ReadFile, ListFiles)
    WRITE_TOOLS: ClassVar[tuple[type[Tool], ...]] = (WriteFile, ReplaceInFile)
    Exclusive: ClassVar[type[Filesystem]]

    @classmethod
    def tools(cls, binding: Binding) -> list[type[Tool]]:
        sandbox = required_sandbox(binding, cls.__qualname__)
        return [*cls.READ_TOOLS, *(cls.WRITE_TOOLS if sandbox.writable else ())]


class _ExclusiveFilesystem(Filesystem):
    """Filesystem with every tool exclusive: for a workspace several calls of one turn mutate."""

    READ_TOOLS = (_exclusive(ReadFile), _exclusive(ListFiles))
    WRITE_TOOLS = (_exclusive(WriteFile), _exclusive(ReplaceInFile))


_ExclusiveFilesystem.__name__ = "Exclusive"
_ExclusiveFilesystem.__qualname__ = "Filesystem.Exclusive"
Filesystem.Exclusive = _ExclusiveFilesystem

__all__ = ["Filesystem", "ListFiles", "ReadFile", "ReplaceInFile", "WriteFile"]
