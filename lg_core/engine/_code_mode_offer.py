"""What a code-mode agent's model turn offers: the controls, the kept tools, and the program catalog.

With code mode, every tool that moves into programs (all but those named in
``except`` and the at-most-once ones: lg_core.code_mode.options) leaves the
model's tool list; ``exec``, ``wait`` and ``stop`` take their place, and the
system prompt gains the program instructions with the catalog's Python
signatures, so the model is told of exactly the functions a program can call.
"""

from __future__ import annotations

from typing import Any

from lg_core.code_mode.catalog import Catalog
from lg_core.code_mode.controls import CONTROL_SPECIFICATIONS
from lg_core.code_mode.instructions import instructions
from lg_core.code_mode.options import program_tool_names
from lg_core.models.request import ToolSpecification


def code_mode_offer(
    agent_class: Any, specifications: tuple[ToolSpecification, ...], registry: Any
) -> tuple[tuple[ToolSpecification, ...], Catalog | None]:
    """The tools the model is offered and the program catalog; ``specifications`` and None without code mode."""
    options = agent_class.code_mode_options()
    if options is None:
        return specifications, None
    moved = program_tool_names(options, registry)
    catalog = Catalog(spec for spec in specifications if spec.name in moved)
    return CONTROL_SPECIFICATIONS + tuple(spec for spec in specifications if spec.name not in moved), catalog


def with_program_instructions(system: str | None, catalog: Catalog | None) -> str | None:
    """``system`` followed by the code-mode instructions for ``catalog`` (``system`` itself without one)."""
    if catalog is None:
        return system
    usage = instructions(catalog)
    return usage if not system else f"{system}\n\n{usage}"


__all__ = ["code_mode_offer", "with_program_instructions"]
