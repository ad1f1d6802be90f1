"""Built-in tools: files and programs through the run's Sandbox, and a shared plan.

    from lg_core.tools import Filesystem, Shell, WriteTodos

    class CodingAgent(Agent):
        tools = [Filesystem, Shell, WriteTodos]

They go through the normal tool path (validation, callbacks, events, durable steps
with idempotency keys) like an application's tools. Filesystem and Shell add no
isolation of their own: they delegate to the Sandbox bound to the run (the
``sandbox`` setting), which enforces paths, access, limits and cancellation, and
they refuse to be built for a run that has none.

    _sandboxed.py    the base of the tools that need the run's sandbox
    filesystem.py    Filesystem (a provider) and ReadFile, ListFiles, WriteFile, ReplaceInFile; Filesystem.Exclusive
    shell.py         Shell: one argument vector, no shell syntax, bounded time and output
    write_todos.py   WriteTodos: the plan kept in the run's working state
"""

from lg_core.tools.filesystem import Filesystem, ListFiles, ReadFile, ReplaceInFile, WriteFile
from lg_core.tools.shell import Shell
from lg_core.tools.write_todos import WriteTodos

__all__ = ["Filesystem", "ListFiles", "ReadFile", "ReplaceInFile", "Shell", "WriteFile", "WriteTodos"]
