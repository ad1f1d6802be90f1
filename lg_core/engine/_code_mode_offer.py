"""What a code-mode agent's model turn offers and schedules: the controls, the kept tools, the program
catalog, and where a ``wait`` or ``stop`` must run.

With code mode, every tool that moves into programs (all but those named in
``except`` and the at-most-once ones: lg_core.code_mode.options) leaves the
model's tool list; ``exec``, ``wait`` and ``stop`` take their place, and the
system prompt gains the program instructions with the catalog's Python
signatures, so the model is told of exactly the functions a program can call.

A program lives in the process that ran its ``exec``. The step that left it
running records that process (``program_holder`` in its stored result); a
``wait`` or ``stop`` the model asks for later carries it in its input, and its
step is routed to that process's own queue (lg_core.engine._code_exec).
"""

from __future__ import annotations

from typing import Any

from lg_core.code_mode.catalog import Catalog
from lg_core.code_mode.controls import CONTROL_SPECIFICATIONS, STOP, WAIT
from lg_core.code_mode.instructions import instructions
from lg_core.code_mode.options import program_tool_names
from lg_core.engine._turn_keys import CODE_EXEC
from lg_core.models.request import ToolSpecification

PROGRAM_HOLDER = "program_holder"  # in a step's result and a wait's or stop's input: who runs the program


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


def program_holder(scope: Any, tool_uses: Any) -> str | None:
    """The process running the frame's program, when ``tool_uses`` has a wait or stop to send there.

    The latest control step of the frame that left a program running says which; read
    only for a turn that asks to observe one, in the turn's perform, outside its transition.
    """
    if scope.agent_class.code_mode_options() is None or not any(use.name in (WAIT, STOP) for use in tool_uses):
        return None
    store, run_id, prefix = scope.engine.store, scope.run.id, f"{scope.frame.path}/turn-"
    latest: tuple[int, str | None] = (-1, None)
    for step in scope.patiently(lambda: store.load_steps(run_id, prefix=prefix)):
        if step.kind != CODE_EXEC or not step.result:
            continue
        turn = int(step.key[len(prefix) :].split("/", 1)[0])
        if turn > latest[0]:
            latest = (turn, step.result.get(PROGRAM_HOLDER))
    return latest[1]


__all__ = ["PROGRAM_HOLDER", "code_mode_offer", "program_holder", "with_program_instructions"]
