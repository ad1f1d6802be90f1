"""The README's Graph example runs as written: triage routes to billing, which respond answers from."""

from __future__ import annotations

from lg_core.providers import scripted
from tests.docs.readme import marked_blocks


def test_the_readme_graph_example_routes_and_answers(config, capsys):
    (block,) = marked_blocks("readme-graph")
    namespace: dict = {"__name__": "readme_graph"}
    try:
        exec(compile(block.code, "README.md", "exec"), namespace)
    finally:
        for name in ("triage", "billing", "general", "respond"):
            scripted.unregister(name)

    run = namespace["run"]
    assert run.outcome == "completed", run.error
    assert run.response == "You were charged once; the other is a hold that will drop off."
    assert capsys.readouterr().out.splitlines()[-1] == "['triage', 'billing', 'respond']"
    assert run.result.trajectory.transitions() == [("triage-1", "billing-2"), ("billing-2", "respond-3")]
