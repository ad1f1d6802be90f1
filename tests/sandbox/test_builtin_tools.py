"""The built-in tools called directly with a bound Bubblewrap sandbox: which tools a sandbox offers,
the Exclusive variant, the shell's bounds, and the refusal to build without a sandbox."""

from __future__ import annotations

import json

import pytest

from lg_core.errors import ConfigurationError
from lg_core.sandboxes import Bubblewrap
from lg_core.tool import Binding
from lg_core.tool_registry import ToolRegistry
from lg_core.tools import Filesystem, ReadFile, Shell, WriteTodos
from lg_core.tools import shell as shell_module
from tests.sandbox.conftest import requires_bwrap

pytestmark = requires_bwrap


@pytest.fixture
def read_only(workspace):
    sandbox = Bubblewrap(workspace=workspace, policy={"files": {"root": "read_only"}, "network": "none"}).open()
    yield sandbox
    sandbox.close()


def test_a_writable_sandbox_gets_every_filesystem_tool_and_a_read_only_one_only_the_readers(bwrap, read_only):
    assert ToolRegistry([Filesystem], binding=Binding(sandbox=bwrap)).names == [
        "read_file",
        "list_files",
        "write_file",
        "replace_in_file",
    ]
    assert ToolRegistry([Filesystem], binding=Binding(sandbox=read_only)).names == ["read_file", "list_files"]


def test_the_exclusive_filesystem_offers_the_same_names_every_one_exclusive(bwrap):
    registry = ToolRegistry([Filesystem.Exclusive], binding=Binding(sandbox=bwrap))

    assert registry.names == ToolRegistry([Filesystem], binding=Binding(sandbox=bwrap)).names
    assert all(tool.exclusive for tool in registry)
    assert not any(tool.exclusive for tool in ToolRegistry([Filesystem], binding=Binding(sandbox=bwrap)))


def test_sandboxed_tools_refuse_to_be_built_without_a_sandbox():
    with pytest.raises(ConfigurationError, match="Filesystem works through the run's sandbox"):
        ToolRegistry([Filesystem])
    with pytest.raises(ConfigurationError, match="Shell works through the run's sandbox"):
        ToolRegistry([Shell])
    with pytest.raises(ConfigurationError, match="ReadFile works through the run's sandbox"):
        ReadFile()
    assert ToolRegistry([WriteTodos]).names == ["write_todos"]  # the plan needs no sandbox


def test_a_shell_command_past_its_time_is_stopped_and_says_so(bwrap, monkeypatch):
    monkeypatch.setattr(shell_module, "TIMEOUT_SECONDS", 1)
    outcome = Shell(Binding(sandbox=bwrap)).execute({"command": ["sleep", "30"]})

    result = json.loads(outcome.text)
    assert result["success"] is False
    assert result["error"] == "the program did not finish within 1 seconds and was stopped"


def test_shell_output_is_bounded_per_stream(bwrap, monkeypatch):
    monkeypatch.setattr(shell_module, "OUTPUT_BYTES", 1000)
    outcome = Shell(Binding(sandbox=bwrap)).execute(
        {"command": ["python3", "-c", "import sys; print('x' * 5000); print('y' * 10, file=sys.stderr)"]}
    )

    result = json.loads(outcome.text)
    assert len(result["stdout"]) <= 1000 and result["stderr"] == "y" * 10 + "\n"
    assert result["truncated"] == {"stdout": True, "stderr": False}


def test_a_read_past_the_sandbox_limit_is_a_tool_error(workspace):
    sandbox = Bubblewrap(
        workspace=workspace, policy={"files": {"root": "read_write"}, "network": "none"}, limits={"read_bytes": 10}
    ).open()
    try:
        sandbox.write("big.txt", "x" * 100)
        outcome = ReadFile(Binding(sandbox=sandbox)).execute({"path": "big.txt"})
    finally:
        sandbox.close()

    assert outcome.status == "error"
    assert outcome.text == "big.txt is larger than the read limit of 10 bytes"


def test_write_todos_without_a_run_keeps_its_plan_on_the_instance():
    todos = WriteTodos()
    todos.execute({"todos": [{"title": "One", "status": "pending"}]})
    outcome = todos.execute(
        {"todos": [{"id": "todo-1", "title": "One", "status": "completed"}, {"title": "Two", "status": "pending"}]}
    )

    assert json.loads(outcome.text)["todos"] == [
        {"id": "todo-1", "title": "One", "status": "completed"},
        {"id": "todo-2", "title": "Two", "status": "pending"},
    ]
    assert todos.plan() == json.loads(outcome.text)["todos"]
