"""Shell: run one program through the run's Sandbox.

The input is an argument vector, so nothing the model writes is read as shell
syntax: ``["ls", "-la"]`` runs ``ls``, and ``["ls && rm -r /"]`` names a program
that does not exist. The child gets a cleared environment (plus what the sandbox
policy sets and the workspace variables), 30 seconds, and at most 1 MB of each
output stream; it may start children where the backend allows. These bounds
limit accidents; the sandbox's backend is the isolation.
"""

from __future__ import annotations

import json
from typing import Any

from lg_core.tools._sandboxed import SandboxedTool

TIMEOUT_SECONDS = 30
OUTPUT_BYTES = 1_000_000


class Shell(SandboxedTool):
    tool_name = "shell"
    description = (
        "Run one program in the sandbox and get its output as JSON (stdout, stderr, exit_status, success). "
        "command is an argument vector such as ['python3', 'script.py'], not a shell line: pipes, redirections "
        "and variables are not interpreted. It starts in the workspace root and stops after 30 seconds."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "command": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "the program and its arguments, e.g. ['ls', '-la', 'notes']",
            }
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    def call(self, input: dict[str, Any]) -> str:
        execution = self.sandbox.execute_program(
            input["command"], timeout=TIMEOUT_SECONDS, context=self.context, max_output_bytes=OUTPUT_BYTES
        )
        result: dict[str, Any] = {
            "stdout": execution.stdout,
            "stderr": execution.stderr,
            "exit_status": execution.exit_code,
            "success": execution.success,
        }
        if execution.stdout_truncated or execution.stderr_truncated:
            result["truncated"] = {"stdout": execution.stdout_truncated, "stderr": execution.stderr_truncated}
        if execution.error is not None:
            result["error"] = _stopped(execution.error)
        return json.dumps(result, ensure_ascii=False)


def _stopped(error: BaseException) -> str:
    """Why the program did not finish on its own, in words safe to show the model."""
    if isinstance(error, TimeoutError):
        return f"the program did not finish within {TIMEOUT_SECONDS} seconds and was stopped"
    return f"the program was stopped at a sandbox limit ({type(error).__name__})"


__all__ = ["Shell"]
