"""The README's built-in tools example runs as written, on bwrap, with the scripted model in place of
the real one and temporary directories in place of /srv."""

from __future__ import annotations

from tests.docs.readme import marked_blocks
from tests.sandbox.conftest import requires_bwrap


@requires_bwrap
def test_the_readme_tools_example_reads_the_source_and_writes_a_note(config, script, tmp_path):
    (block,) = marked_blocks("readme-tools")
    source = tmp_path / "source"
    source.mkdir()
    (source / "README.md").write_text("LittleGhost runs agents durably.\n")
    target = script(
        [
            {"tool_calls": [{"name": "read_file", "id": "r", "arguments": {"path": "workspace://source/README.md"}}]},
            {
                "tool_calls": [
                    {
                        "name": "write_file",
                        "id": "w",
                        "arguments": {"path": "notes/summary.md", "content": "Durable agents.\n"},
                    }
                ]
            },
            {"text": "Written to notes/summary.md."},
        ]
    )
    code = (
        block.code.replace("/srv/lg/runs", str(tmp_path / "runs"))
        .replace("/srv/support/source", str(source))
        .replace('"openai:gpt-4o"', repr(target))
    )
    namespace: dict = {"__name__": "readme_tools"}
    exec(compile(code, "README.md", "exec"), namespace)

    run = namespace["run"]
    assert run.outcome == "completed", run.error
    assert (tmp_path / "runs" / run.id / "notes" / "summary.md").read_text() == "Durable agents.\n"
