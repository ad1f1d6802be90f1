"""The built-in Filesystem, Shell and WriteTodos tools inside real Agent runs on real bwrap.

A scripted model drives each run; every assertion reads what the model was told
(the tool results of the conversation) or what is on disk afterwards. The
workspace and sandbox come from the settings, as a deployment configures them.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from lg_core import Agent
from lg_core.config import Configuration, with_configuration
from lg_core.errors import ConfigurationError
from lg_core.tools import Filesystem, Shell, WriteTodos
from tests.sandbox.conftest import requires_bwrap

pytestmark = requires_bwrap


def call(name, call_id, **arguments):
    return {"name": name, "id": call_id, "arguments": arguments}


def tool_results(run):
    """Every tool result of the run, by call id: (status, text)."""
    results = {}
    for message in run.result.messages:
        if message.role == "tool":
            for block in message.tool_results:
                results[block.tool_use_id] = (block.status, block.text)
    return results


def agent_for(target, *tools):
    return type("FilesAgent", (Agent,), {"model": target, "tools": list(tools)})


@pytest.fixture
def source(tmp_path):
    """A read-only reference directory the workspace names ``source``."""
    directory = tmp_path / "source"
    directory.mkdir()
    (directory / "guide.md").write_text("Refunds are available within 30 days.\n")
    return directory


@pytest.fixture
def secret(tmp_path):
    directory = tmp_path / "outside"
    directory.mkdir()
    path = directory / "secret.txt"
    path.write_text("top secret")
    return path


def configured(tmp_path, source, files=None, root=None):
    return Configuration(
        workspace={"root": root or str(tmp_path / "runs" / "{run_id}"), "paths": {"source": str(source)}},
        sandbox={
            "provider": "bubblewrap",
            "files": files or {"root": "read_write", "source": "read_only"},
            "network": "none",
        },
    )


@pytest.fixture
def sandboxed(tmp_path, source):
    configuration = configured(tmp_path, source)
    with with_configuration(configuration):
        yield configuration
    configuration.close()


def test_a_model_lists_reads_writes_and_replaces_files_in_its_runs_workspace(sandboxed, script, tmp_path):
    target = script(
        [
            {"tool_calls": [call("list_files", "ls-source", path="workspace://source")]},
            {"tool_calls": [call("read_file", "read-guide", path="workspace://source/guide.md")]},
            {"tool_calls": [call("write_file", "write", path="notes/answer.md", content="Refunds: 30 days.\n")]},
            {
                "tool_calls": [
                    call("replace_in_file", "replace", path="notes/answer.md", old_text="30", new_text="thirty")
                ]
            },
            {"tool_calls": [call("list_files", "ls-root"), call("read_file", "read-answer", path="notes/answer.md")]},
            {"text": "Done."},
        ]
    )

    run = agent_for(target, Filesystem).ask("Answer from the guide")

    assert run.outcome == "completed"
    results = tool_results(run)
    assert results["ls-source"] == ("success", "guide.md")
    assert results["read-guide"] == ("success", "Refunds are available within 30 days.\n")
    assert results["write"] == ("success", "Wrote 18 bytes to notes/answer.md.")
    assert results["replace"] == ("success", "Replaced 1 occurrence in notes/answer.md.")
    assert results["ls-root"] == ("success", "notes/")
    assert results["read-answer"] == ("success", "Refunds: thirty days.\n")
    # The run's files live under its own root, which outlives the steps that wrote them.
    assert (tmp_path / "runs" / run.id / "notes" / "answer.md").read_text() == "Refunds: thirty days.\n"


def test_a_write_to_a_read_only_path_is_refused_with_an_error_the_model_reads(sandboxed, script, source):
    target = script(
        [
            {"tool_calls": [call("write_file", "w", path="workspace://source/guide.md", content="Refunds: never.")]},
            {
                "tool_calls": [
                    call("replace_in_file", "r", path="workspace://source/guide.md", old_text="30", new_text="0")
                ]
            },
            {"text": "I cannot change the guide."},
        ]
    )

    run = agent_for(target, Filesystem).ask("Change the guide")

    assert run.outcome == "completed"
    assert tool_results(run)["w"] == ("error", "workspace://source/guide.md is read-only in this sandbox")
    assert tool_results(run)["r"] == ("error", "workspace://source/guide.md is read-only in this sandbox")
    assert (source / "guide.md").read_text() == "Refunds are available within 30 days.\n"


def test_a_read_only_sandbox_offers_the_model_no_mutation_tools(tmp_path, source, script):
    offered = []

    def serve(request):
        offered.append(sorted(spec.name for spec in request.tools))
        return {"text": "Looked."}

    configuration = configured(tmp_path, source, files={"root": "read_only", "source": "read_only"})
    with with_configuration(configuration):
        run = agent_for(script(serve), Filesystem).ask("Look")
    configuration.close()

    assert run.outcome == "completed"
    assert offered == [["list_files", "read_file"]]


def test_paths_out_of_the_workspace_are_refused_with_errors_naming_only_the_logical_path(
    tmp_path, source, secret, script
):
    root = tmp_path / "fixed-root"
    root.mkdir()
    os.symlink(secret, root / "link.txt")
    os.symlink(secret.parent, root / "linked-dir")
    target = script(
        [
            {
                "tool_calls": [
                    call("read_file", "absolute", path=str(secret)),
                    call("read_file", "dotdot", path="../outside/secret.txt"),
                    call("read_file", "link", path="link.txt"),
                    call("read_file", "linked-dir", path="linked-dir/secret.txt"),
                    call("write_file", "write-link", path="linked-dir/planted.txt", content="x"),
                    call("read_file", "unknown-name", path="workspace://home/x"),
                ]
            },
            {"text": "Refused."},
        ]
    )
    configuration = configured(tmp_path, source, root=str(root))
    with with_configuration(configuration):
        run = agent_for(target, Filesystem).ask("Read the secret")
    configuration.close()

    results = tool_results(run)
    assert all(status == "error" for status, _text in results.values())
    assert "physical absolute path" in results["absolute"][1]
    assert "leaves its workspace path" in results["dotdot"][1]
    assert "symbolic link" in results["link"][1]
    assert "symbolic link" in results["linked-dir"][1]
    assert "symbolic link" in results["write-link"][1]
    assert "no path named 'home'" in results["unknown-name"][1]
    # Only the path the model itself wrote is repeated back; the host layout never is.
    assert not any(str(tmp_path) in text for key, (_status, text) in results.items() if key != "absolute")
    assert not (secret.parent / "planted.txt").exists()


def test_bad_inputs_get_clear_validation_errors(sandboxed, script):
    target = script(
        [
            {
                "tool_calls": [
                    call("read_file", "no-path"),
                    call("write_file", "no-content", path="a.md"),
                    call("shell", "shell-string", command="ls -la"),
                    call("shell", "shell-empty", command=[]),
                    call("replace_in_file", "empty-old", path="a.md", old_text="", new_text="x"),
                    call("list_files", "extra", path=".", recursive=True),
                ]
            },
            {"text": "Fixed my inputs."},
        ]
    )

    run = agent_for(target, Filesystem, Shell).ask("Try")

    results = tool_results(run)
    assert all(status == "error" for status, _text in results.values())
    assert results["no-path"][1].startswith("Invalid input for tool 'read_file'") and "path" in results["no-path"][1]
    assert "content" in results["no-content"][1]
    assert results["shell-string"][1].startswith("Invalid input for tool 'shell'")
    assert results["shell-empty"][1].startswith("Invalid input for tool 'shell'")
    assert results["empty-old"][1].startswith("Invalid input for tool 'replace_in_file'")
    assert "recursive" in results["extra"][1]


def test_replace_needs_exactly_one_occurrence(sandboxed, script):
    target = script(
        [
            {"tool_calls": [call("write_file", "w", path="a.md", content="one two two")]},
            {
                "tool_calls": [
                    call("replace_in_file", "twice", path="a.md", old_text="two", new_text="2"),
                    call("replace_in_file", "never", path="a.md", old_text="three", new_text="3"),
                    call("read_file", "missing", path="b.md"),
                ]
            },
            {"text": "ok"},
        ]
    )

    results = tool_results(agent_for(target, Filesystem.Exclusive).ask("Edit"))

    assert results["twice"] == ("error", "the text to replace occurs 2 times in a.md; it must occur exactly once")
    assert results["never"] == ("error", "the text to replace occurs 0 times in a.md; it must occur exactly once")
    assert results["missing"] == ("error", "b.md does not exist")


def test_the_shell_runs_one_argument_vector_confined_to_the_workspace(sandboxed, script, secret, tmp_path):
    target = script(
        [
            {"tool_calls": [call("write_file", "w", path="hello.py", content="print('hello from', __file__)")]},
            {
                "tool_calls": [
                    call("shell", "python", command=["python3", "hello.py"]),
                    call("shell", "secret", command=["cat", str(secret)]),
                    call("shell", "syntax", command=["echo hi && cat /etc/shadow"]),
                    call("shell", "substitution", command=["echo", "$(cat /etc/hostname)", "$HOME"]),
                    call("shell", "environment", command=["env"]),
                    call(
                        "shell",
                        "socket",
                        command=["python3", "-c", "import socket; socket.create_connection(('1.1.1.1', 53), 2)"],
                    ),
                ]
            },
            {"text": "Ran."},
        ]
    )

    run = agent_for(target, Filesystem, Shell).ask("Run")

    results = {key: json.loads(text) for key, (_status, text) in tool_results(run).items() if key != "w"}
    assert results["python"]["success"] is True
    assert results["python"]["stdout"].startswith("hello from")
    assert results["secret"]["success"] is False and "No such file" in results["secret"]["stderr"]
    assert results["syntax"]["success"] is False and results["syntax"]["stdout"] == ""
    assert results["substitution"]["stdout"] == "$(cat /etc/hostname) $HOME\n"
    assert "OPENAI_API_KEY" not in results["environment"]["stdout"]
    assert "LITTLE_GHOST_WORKSPACE_ROOT=" in results["environment"]["stdout"]
    assert results["socket"]["success"] is False
    assert "Network is unreachable" in results["socket"]["stderr"]  # an empty network namespace: no route out
    assert results["syntax"]["stderr"]  # bwrap could not find a program named "echo hi && cat /etc/shadow"


def test_write_todos_keeps_the_plan_in_the_runs_state(config, script):
    target = script(
        [
            {
                "tool_calls": [
                    call(
                        "write_todos",
                        "plan",
                        todos=[
                            {"title": "  Read the guide ", "status": "in_progress"},
                            {"title": "Answer", "status": "pending"},
                        ],
                    )
                ]
            },
            {
                "tool_calls": [
                    call(
                        "write_todos",
                        "two-in-progress",
                        todos=[
                            {"id": "todo-1", "title": "Read the guide", "status": "in_progress"},
                            {"id": "todo-2", "title": "Answer", "status": "in_progress"},
                        ],
                    )
                ]
            },
            {
                "tool_calls": [
                    call(
                        "write_todos",
                        "progress",
                        todos=[
                            {"id": "todo-1", "title": "Read the guide", "status": "completed"},
                            {"id": "todo-2", "title": "Answer", "status": "in_progress"},
                            {"title": "Check", "status": "pending"},
                        ],
                    )
                ]
            },
            {"text": "Planned."},
        ]
    )

    run = agent_for(target, WriteTodos).ask("Plan")

    results = tool_results(run)
    assert json.loads(results["plan"][1])["todos"][0] == {
        "id": "todo-1",
        "title": "Read the guide",
        "status": "in_progress",
    }
    assert results["two-in-progress"] == ("error", "2 todos are in_progress (todo-1, todo-2); at most one may be")
    assert run.result.state["todos"] == [
        {"id": "todo-1", "title": "Read the guide", "status": "completed"},
        {"id": "todo-2", "title": "Answer", "status": "in_progress"},
        {"id": "todo-3", "title": "Check", "status": "pending"},
    ]


def test_filesystem_without_a_configured_sandbox_fails_the_run_with_a_configuration_error(config, script):
    run = agent_for(script([{"text": "never"}]), Filesystem).ask("Read")

    assert run.outcome == "failed"
    assert isinstance(run.error, ConfigurationError)
    assert "Filesystem works through the run's sandbox, and this run has none" in str(run.error)


def test_cancelling_a_run_stops_its_shell_program_and_leaves_no_process_behind(tmp_path, source, script):
    root = tmp_path / "fixed-root"
    marker = "61.4142"  # a sleep only this test starts, to find it among the host's processes
    command = ["sh", "-c", f"echo started > started.txt; exec sleep {marker}"]
    target = script([{"tool_calls": [call("shell", "long", command=command)]}, {"text": "never"}])
    configuration = configured(tmp_path, source, root=str(root))
    with with_configuration(configuration):
        execution = agent_for(target, Shell).start_execution("Run it")
        deadline = time.monotonic() + 30
        while not (root / "started.txt").exists():
            assert time.monotonic() < deadline, "the shell program never started"
            time.sleep(0.05)
        started = time.monotonic()
        execution.cancel()
        run = execution.wait(timeout=30)
    configuration.close()

    assert run.outcome == "cancelled"
    assert time.monotonic() - started < 10
    assert not [pid for pid in _pids() if marker in _cmdline(pid)]


def _pids():
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""
