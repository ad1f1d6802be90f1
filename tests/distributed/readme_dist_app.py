"""The README's assembly examples as modules the workers can import, so they run on Celery workers as written.

A stored assembly definition names its classes by import path, so a worker must be able to
import the README's classes. Importing this module runs each README example's code blocks (up
to the block's own ``run = ...`` call, which the test makes instead) in a module of its own,
registered as ``readme_dist_app.<example>``: a worker importing ``readme_dist_app.resolution``
imports this module first, which registers that name. An example built on earlier blocks runs
them first in its module, as a reader pasting them in order would. Every example's scripted
models are registered in the importing process, workers included.
"""

from __future__ import annotations

import re
import sys
import types

from tests.docs.readme import marked_blocks

EXAMPLES = {
    "routed": ("readme-routed-workflow",),
    "investigation": ("readme-investigation-workflow", "readme-investigation-graph"),
    "resolution": ("readme-swarm", "readme-investigation-workflow", "readme-resolution-graph"),
    "assembly_tools": ("readme-assembly-tools",),
}
_CALL = re.compile(r"^run = ", re.MULTILINE)


def _declarations(marker: str) -> str:
    """The block's code before its example call: the scripted models and the classes."""
    (block,) = marked_blocks(marker)
    return _CALL.split(block.code, maxsplit=1)[0]


def _example_module(name: str, markers: tuple[str, ...]) -> types.ModuleType:
    module = types.ModuleType(f"{__name__}.{name}", f"The README blocks {', '.join(markers)}.")
    sys.modules[module.__name__] = module
    for marker in markers:
        exec(compile(_declarations(marker), f"README.md ({marker})", "exec"), module.__dict__)
    return module


routed = _example_module("routed", EXAMPLES["routed"])
investigation = _example_module("investigation", EXAMPLES["investigation"])
resolution = _example_module("resolution", EXAMPLES["resolution"])
assembly_tools = _example_module("assembly_tools", EXAMPLES["assembly_tools"])
