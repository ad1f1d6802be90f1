"""Other local stacks running on this machine, found from their processes rather than a registry.

``lg stack up`` gives its workers, scheduler and Flower the stack directory in their environment
(:data:`lg_core.run.STACK_DIR_VARIABLE`), so a running stack can be found from any directory by
reading the environments of this user's processes: ``status`` in the wrong directory can say where
the stack is, and ``up`` can warn before it starts a second one on other ports.
"""

from __future__ import annotations

from pathlib import Path

import psutil

from lg_core.run import STACK_DIR_VARIABLE


def running_stack_dirs(excluding: Path | None = None) -> list[Path]:
    """The directories of stacks whose processes run now (those this user may inspect), ``excluding`` one."""
    found: set[Path] = set()
    for process in psutil.process_iter():
        try:
            directory = process.environ().get(STACK_DIR_VARIABLE)
        except (psutil.Error, OSError):
            continue
        if directory and Path(directory) != excluding and (Path(directory) / "pids").is_dir():
            found.add(Path(directory))
    return sorted(found)


__all__ = ["running_stack_dirs"]
