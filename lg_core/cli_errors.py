"""A usage error of an ``lg`` command, and how one is shown: one red line on stderr, exit code 2."""

from __future__ import annotations

import typer
from rich.markup import escape

from lg_core.cli_output import error_console


class UsageError(Exception):
    """A problem with what the user asked for: one red line on stderr, exit code 2."""


def fail(message: str, code: int = 2) -> None:
    """Print ``message`` as one red line on stderr and exit with ``code``."""
    error_console().print(f"[bold red]error:[/] [red]{escape(message)}[/]", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


__all__ = ["UsageError", "fail"]
