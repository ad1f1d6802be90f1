"""The class a run executes, named by its import path: what another process imports to continue the run.

A stored run names its entrypoint ``module:QualName``; a worker, a resumed run or a retry imports
it by that path. These functions import it with errors that say how to make it importable, and
refuse, before a run exists, a class no other process could import.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from lg_core.errors import ConfigurationError, RunStateError
from lg_core.import_path import import_attribute

# Set by ``lg stack up`` in its workers' environment: the stack directory, so errors can say how those workers
# get application code.
STACK_DIR_VARIABLE = "LG_STACK_DIR"


def import_entrypoint(path: str) -> type:
    """Import ``module:QualName``; the class must live in an importable module."""
    try:
        target: Any = import_attribute(path)
    except (ValueError, ImportError, AttributeError) as exc:
        module = path.partition(":")[0]
        raise RunStateError(
            f"cannot import the run's entrypoint {path!r} ({exc}); agents whose runs are resumed "
            "elsewhere must be defined at module level in an importable module (not __main__ or a function), "
            f"and every process that continues the run must import it: {_worker_import_hint(module)}"
            f"{_stale_code_hint(exc, module)}"
        ) from None
    if not isinstance(target, type):
        raise RunStateError(f"entrypoint {path!r} is not a class")
    return target


def _worker_import_hint(module: str) -> str:
    """How this process's workers get ``module``: ``lg stack``'s workers are started by ``up``, not by hand.

    A stack worker imports application code from the directory ``lg stack up`` ran in (its working
    directory) and PYTHONPATH; ``lg worker --import`` cannot reach it, so the hint says where to run ``up``.
    """
    stack_dir = os.environ.get(STACK_DIR_VARIABLE)
    if not stack_dir:
        return f"`lg worker --import {module}` (or LG_IMPORTS={module}) for workers"
    return (
        f"the workers of the stack in {stack_dir} import application code from the directory `lg stack up` "
        f"ran in ({os.getcwd()}) or PYTHONPATH, where {module} is not found: run `lg stack down --dir "
        f"{stack_dir}`, then `lg stack up --import {module}` from the directory that holds it (or with it on "
        "PYTHONPATH)"
    )


def _stale_code_hint(error: BaseException, module: str) -> str:
    """The likely cause when the module imports but lacks the class: this process runs older code.

    A worker imports the application once, when it starts; a class added (or
    renamed) since then is missing from its copy of the module, though the
    process that started the run, with the current code, found it.
    """
    if not isinstance(error, AttributeError) or module not in sys.modules:
        return ""
    return (
        f". If the class was added or renamed after this process imported {module}, restart it to load the "
        "current code (`lg stack down` then `lg stack up`, or restart `lg worker`); the run goes on once it can"
    )


def check_importable_elsewhere(cls: type) -> None:
    """Raise ConfigurationError when other processes cannot import ``cls`` by its path.

    A run executed by workers is continued from its stored entrypoint path; a class
    defined in a function or in the script run as ``__main__`` has a path that no
    other process can import, so its run would stay 'running' forever, sent from
    worker to worker. Refused before the run exists, with how to fix it.
    """
    if cls.__module__ == "__main__":
        where = "in __main__ (the script being run)"
    elif "<locals>" in cls.__qualname__:
        where = "inside a function"
    else:
        return
    raise ConfigurationError(
        f"{cls.__qualname__} is defined {where}, so no worker can import it to run its steps; with a broker "
        "configured, define it at module level in an importable module (e.g. myapp/agents.py) that workers "
        "import (lg worker --import myapp.agents), or unset broker_url to run executions on threads here"
    )


__all__ = ["STACK_DIR_VARIABLE", "check_importable_elsewhere", "import_entrypoint"]
