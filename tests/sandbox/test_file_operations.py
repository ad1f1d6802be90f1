"""Sandbox file operations: logical paths only, granted access only, no symbolic link followed."""

from __future__ import annotations

import os

import pytest

from lg_core.errors import ToolError
from lg_core.sandboxes import Unrestricted
from lg_core.workspace import Workspace


@pytest.fixture
def layout(tmp_path):
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "readme.md").write_text("source readme\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("top secret")
    workspace = Workspace(
        root=tmp_path / "root", paths={"source": tmp_path / "source", "home": "runtime-home", "docs": "docs"}
    ).open()
    return tmp_path, workspace


@pytest.fixture
def sandbox(layout):
    _, workspace = layout
    policy = {
        "files": {"root": "read_write", "source": "read_only", "docs": "read_only"},
        "runtime_paths": {"home": "read_write"},
    }
    with Unrestricted(workspace=workspace, policy=policy, limits={"read_bytes": 100, "list_entries": 3}) as sandbox:
        yield sandbox


def test_write_read_replace_and_list_round_trip(sandbox, layout):
    tmp_path, _ = layout
    assert sandbox.write("notes/today.md", "hello world\n") == 12
    assert (tmp_path / "root" / "notes" / "today.md").read_text() == "hello world\n"
    assert sandbox.read("notes/today.md") == "hello world\n"
    assert sandbox.replace("notes/today.md", "world", "there") == "hello there\n"
    assert sandbox.read("workspace://source/readme.md") == "source readme\n"
    assert sandbox.list("notes") == "today.md"


def test_a_listing_is_sorted_marks_directories_hides_runtime_paths_and_is_bounded(sandbox):
    for name in ("b.txt", "a.txt", "c.txt"):
        sandbox.write(name, "x")
    # root holds a.txt b.txt c.txt docs/ runtime-home/; the runtime path is not counted
    assert sandbox.list(".") == "a.txt\nb.txt\nc.txt\n... and 1 more"
    sandbox.write("docs2/inner.txt", "x")
    assert sandbox.list("docs2") == "inner.txt"


def test_a_read_only_path_refuses_writes(sandbox, layout):
    tmp_path, _ = layout
    with pytest.raises(ToolError, match="workspace://source/new.md is read-only"):
        sandbox.write("workspace://source/new.md", "x")
    with pytest.raises(ToolError, match="docs/x.md is read-only"):
        sandbox.write("docs/x.md", "x")
    with pytest.raises(ToolError, match="read-only"):
        sandbox.replace("workspace://source/readme.md", "source", "changed")
    assert (tmp_path / "source" / "readme.md").read_text() == "source readme\n"


def test_a_runtime_path_is_not_visible_to_file_operations(sandbox):
    with pytest.raises(ToolError, match="runtime-home/x is not inside a path this sandbox grants"):
        sandbox.write("runtime-home/x", "x")
    with pytest.raises(ToolError, match="workspace://home/x is not inside a path"):
        sandbox.read("workspace://home/x")


def test_a_symlink_out_of_the_workspace_is_not_followed(sandbox, layout):
    tmp_path, _ = layout
    os.symlink(tmp_path / "outside", tmp_path / "root" / "escape")
    os.symlink(tmp_path / "outside" / "secret.txt", tmp_path / "root" / "secret.txt")
    with pytest.raises(ToolError, match="symbolic link"):
        sandbox.read("escape/secret.txt")
    with pytest.raises(ToolError, match="symbolic link"):
        sandbox.read("secret.txt")
    with pytest.raises(ToolError, match="symbolic link"):
        sandbox.write("escape/planted.txt", "x")
    with pytest.raises(ToolError, match="symbolic link"):
        sandbox.list("escape")
    assert not (tmp_path / "outside" / "planted.txt").exists()


def test_writing_over_a_symlink_replaces_the_link_not_its_target(sandbox, layout):
    tmp_path, _ = layout
    os.symlink(tmp_path / "outside" / "secret.txt", tmp_path / "root" / "link.txt")
    sandbox.write("link.txt", "replaced")
    assert (tmp_path / "outside" / "secret.txt").read_text() == "top secret"
    assert not os.path.islink(tmp_path / "root" / "link.txt")
    assert sandbox.read("link.txt") == "replaced"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.read("/etc/passwd"), "physical absolute path"),
        (lambda s: s.read("../outside/secret.txt"), "leaves its workspace path"),
        (lambda s: s.read("workspace://nope/x"), "no path named 'nope'"),
        (lambda s: s.read("missing.txt"), "missing.txt does not exist"),
        (lambda s: s.read("."), "is not a regular file"),
        (lambda s: s.read(42), "must be a string"),
        (lambda s: s.write(".", "x"), "is a directory"),
        (lambda s: s.write("big.txt", "x" * 2_000_000), "larger than the write limit"),
        (lambda s: s.replace("r.txt", "", "x"), "must not be empty"),
    ],
)
def test_bad_file_requests_are_refused_with_a_clear_error(sandbox, call, match):
    with pytest.raises(ToolError, match=match):
        call(sandbox)


def test_reads_are_bounded_and_must_be_utf8(sandbox):
    sandbox.write("large.txt", "x" * 101)
    with pytest.raises(ToolError, match="larger than the read limit of 100 bytes"):
        sandbox.read("large.txt")
    sandbox.write("binary.bin", b"\xff\xfe")
    with pytest.raises(ToolError, match="not UTF-8 text"):
        sandbox.read("binary.bin")


def test_replace_needs_exactly_one_occurrence(sandbox):
    sandbox.write("r.txt", "a a")
    with pytest.raises(ToolError, match="occurs 2 times"):
        sandbox.replace("r.txt", "a", "b")
    with pytest.raises(ToolError, match="occurs 0 times"):
        sandbox.replace("r.txt", "z", "b")


def test_a_scope_without_the_capability_refuses_the_operation(sandbox):
    reader = sandbox.scope(capabilities=["filesystem_read"])
    assert reader.read("workspace://source/readme.md") == "source readme\n"
    with pytest.raises(ToolError, match="does not allow filesystem write"):
        reader.write("x.txt", "x")
    with pytest.raises(ToolError, match="does not allow filesystem list"):
        reader.list()
    assert not sandbox.scope(files={"root": "read_only"}).writable


def test_file_operations_fail_closed_when_a_directory_was_replaced(sandbox, layout):
    tmp_path, _ = layout
    os.rename(tmp_path / "source", tmp_path / "source-moved")
    os.symlink(tmp_path / "outside", tmp_path / "source")
    with pytest.raises(Exception, match="was replaced"):
        sandbox.read("workspace://source/secret.txt")
