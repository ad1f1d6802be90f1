"""The README's assembly examples as modules the workers can import, so they run on Celery workers as written.

A stored assembly definition names its classes by import path, so a worker must be able to
import the README's classes. Importing this module runs each README example's code blocks (up
to the block's own ``run = ...`` call, which the test makes instead) in a module of its own,
registered as ``readme_dist_app.<example>``: a worker importing ``readme_dist_app.resolution``
imports this module first, which registers that name. An example built on earlier blocks runs
them first in its module, as a reader pasting them in order would.

Every example's scripted models are registered in the importing process, workers included, so
all of them share one scripted registry, where the README reuses names for different scripts
(the Graph example's ``triage`` answers "billing", the Swarm example's hands off). Each example
module therefore registers its models under its own names, ``<example>.<name>``: while a block
runs, ``scripted.register`` prefixes the name it is given, and afterwards each Agent class the
block declared on a ``scripted:<name>`` model is pointed at ``scripted:<example>.<name>``. The
blocks run unchanged, so the code is the code the README shows a reader, and one worker process
serves every example. (Separate worker processes per example would also keep the scripts apart,
but every worker imports this whole module, and a test would have to pick its workers by example.)
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lg_core import Agent
from lg_core.providers import scripted
from tests.docs.readme import marked_blocks

EXAMPLES = {
    "support_flow": ("readme-graph",),
    "response": ("readme-workflow",),
    "problem_solver": ("readme-swarm",),
    "routed": ("readme-routed-workflow",),
    "investigation": ("readme-investigation-workflow", "readme-investigation-graph"),
    "resolution": ("readme-swarm", "readme-investigation-workflow", "readme-resolution-graph"),
    "assembly_tools": ("readme-assembly-tools",),
}
_CALL = re.compile(r"^run = ", re.MULTILINE)
_SCRIPTED = "scripted:"


def _declarations(marker: str) -> str:
    """The block's code before its example call: the scripted models and the classes."""
    (block,) = marked_blocks(marker)
    return _CALL.split(block.code, maxsplit=1)[0]


@contextmanager
def _registering_under(prefix: str) -> Iterator[None]:
    """While a block runs, ``scripted.register(name, ...)`` registers ``<prefix>.<name>``."""
    register = scripted.register

    def own_name(name: str, turns: Any, **options: Any) -> None:
        register(f"{prefix}.{name}", turns, **options)

    scripted.register = own_name  # type: ignore[assignment]
    try:
        yield
    finally:
        scripted.register = register  # type: ignore[assignment]


def _point_at_own_models(module: types.ModuleType, prefix: str) -> None:
    """Each Agent class of ``module`` on an unprefixed scripted model uses the module's own copy of it."""
    for value in list(vars(module).values()):
        if not (isinstance(value, type) and issubclass(value, Agent) and value.__module__ == module.__name__):
            continue
        model = value.model
        own = f"{_SCRIPTED}{prefix}."
        if isinstance(model, str) and model.startswith(_SCRIPTED) and not model.startswith(own):
            value.model = own + model.removeprefix(_SCRIPTED)


def _example_module(name: str, markers: tuple[str, ...]) -> types.ModuleType:
    module = types.ModuleType(f"{__name__}.{name}", f"The README blocks {', '.join(markers)}.")
    sys.modules[module.__name__] = module
    for marker in markers:
        with _registering_under(name):
            exec(compile(_declarations(marker), f"README.md ({marker})", "exec"), module.__dict__)
        _point_at_own_models(module, name)
    return module


support_flow = _example_module("support_flow", EXAMPLES["support_flow"])
response = _example_module("response", EXAMPLES["response"])
problem_solver = _example_module("problem_solver", EXAMPLES["problem_solver"])
routed = _example_module("routed", EXAMPLES["routed"])
investigation = _example_module("investigation", EXAMPLES["investigation"])
resolution = _example_module("resolution", EXAMPLES["resolution"])
assembly_tools = _example_module("assembly_tools", EXAMPLES["assembly_tools"])
