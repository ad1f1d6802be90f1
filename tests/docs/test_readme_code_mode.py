"""The README's code-mode example runs as written: the scripted model calls exec, the program
composes the tool in parallel on the real bwrap, and the model reads the program's output."""

from __future__ import annotations

import json

from lg_core.providers import scripted
from tests.docs.readme import marked_blocks
from tests.sandbox.conftest import requires_bwrap


@requires_bwrap
def test_the_readme_code_mode_example_composes_tools_in_one_program(config):
    (block,) = marked_blocks("readme-code-mode")
    namespace: dict = {"__name__": "readme_code_mode"}
    try:
        exec(compile(block.code, "README.md", "exec"), namespace)
    finally:
        scripted.unregister("research")

    run = namespace["run"]
    assert run.outcome == "completed", run.error
    assert run.response == "Refunds: 30 days. Shipping: three to five days."
    (result,) = run.result.messages[2].tool_results
    assert json.loads(result.text) == {
        "status": "completed",
        "output": "Refunds are available within 30 days.\nStandard shipping takes three to five days.",
        "value": None,
    }
