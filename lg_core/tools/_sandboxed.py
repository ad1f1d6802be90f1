"""SandboxedTool: a built-in tool that does its work through the run's Sandbox."""

from __future__ import annotations

from typing import Any

from lg_core.errors import ConfigurationError
from lg_core.tool import Binding, Tool


def required_sandbox(binding: Binding, owner: str) -> Any:
    """The binding's sandbox; ConfigurationError when the run has none.

    Raised while the run's tool registry is built (its first model turn), so a
    missing ``sandbox`` setting fails the run with this message instead of every
    call telling the model of an internal error.
    """
    sandbox = binding.sandbox
    if sandbox is None:
        raise ConfigurationError(
            f"{owner} works through the run's sandbox, and this run has none: configure the workspace and "
            "sandbox settings (configure(workspace={'root': ...}, sandbox={'provider': 'bubblewrap', ...}))"
        )
    return sandbox


class SandboxedTool(Tool):
    """A tool whose ``call`` delegates to ``self.sandbox``; refuses to be built without one."""

    def __init__(self, binding: Binding | None = None) -> None:
        super().__init__(binding)
        required_sandbox(self.binding, type(self).__qualname__)
