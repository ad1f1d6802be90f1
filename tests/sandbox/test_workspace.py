"""Workspace: named paths, setup and teardown, real paths, identity pinning and references."""

from __future__ import annotations

import os

import pytest

from lg_core.errors import SandboxConfigurationError
from lg_core.workspace import Workspace


def test_opening_creates_the_root_and_relative_paths_and_resolves_real_paths(tmp_path):
    workspace = Workspace(root=tmp_path / "run", paths={"skills": "skills", "home": "runtime-home"})
    assert workspace.root == str(tmp_path / "run")
    assert workspace.paths["skills"] == str(tmp_path / "run" / "skills")
    workspace.open()
    assert os.path.isdir(tmp_path / "run" / "skills") and os.path.isdir(tmp_path / "run" / "runtime-home")
    assert workspace.real_path("skills") == os.path.realpath(tmp_path / "run" / "skills")
    assert set(workspace.real_paths) == {"root", "skills", "home"}


def test_a_symlinked_root_resolves_to_its_target(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    workspace = Workspace(root=tmp_path / "link").open()
    assert workspace.root == str(tmp_path / "link")
    assert workspace.real_path("root") == str(tmp_path / "real")


def test_an_absolute_path_must_exist_when_the_workspace_opens(tmp_path):
    workspace = Workspace(root=tmp_path / "run", paths={"source": tmp_path / "missing"})
    with pytest.raises(SandboxConfigurationError, match="'source'.*does not exist"):
        workspace.open()
    assert not os.path.exists(tmp_path / "missing")


def test_the_setup_callback_runs_once_before_absolute_paths_are_checked(tmp_path):
    calls = []

    def setup(workspace, run):
        calls.append(run)
        os.makedirs(tmp_path / "provisioned", exist_ok=True)

    workspace = Workspace(root=tmp_path / "run", paths={"data": tmp_path / "provisioned"}, setup=setup)
    workspace.open(run="run-1")
    workspace.open(run="run-1")
    assert calls == ["run-1"]
    assert workspace.real_path("data") == str(tmp_path / "provisioned")


def test_teardown_runs_once_even_after_a_failed_setup_and_deletes_nothing(tmp_path):
    torn_down = []

    def setup(workspace, run):
        raise RuntimeError("provisioning failed")

    workspace = Workspace(root=tmp_path / "run", setup=setup, teardown=lambda workspace, run: torn_down.append(run))
    with pytest.raises(RuntimeError, match="provisioning failed"):
        workspace.open(run="r")
    workspace.close(run="r")
    workspace.close(run="r")
    assert torn_down == ["r"]
    assert os.path.isdir(tmp_path / "run")
    with pytest.raises(SandboxConfigurationError, match="closed"):
        workspace.open()


def test_two_names_for_one_directory_are_refused(tmp_path):
    (tmp_path / "shared").mkdir()
    os.symlink(tmp_path / "shared", tmp_path / "alias")
    workspace = Workspace(root=tmp_path / "run", paths={"a": tmp_path / "shared", "b": tmp_path / "alias"})
    with pytest.raises(SandboxConfigurationError, match="'a' and 'b' name the same directory"):
        workspace.open()


def test_a_named_path_that_is_the_root_itself_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    workspace = Workspace(root=tmp_path / "run", paths={"again": tmp_path / "run"})
    with pytest.raises(SandboxConfigurationError, match="same directory"):
        workspace.open()


def test_a_relative_path_linked_out_of_the_root_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "run" / "skills")
    workspace = Workspace(root=tmp_path / "run", paths={"skills": "skills"})
    with pytest.raises(SandboxConfigurationError, match="outside the root"):
        workspace.open()


def test_a_relative_path_under_a_link_out_of_the_root_is_refused_before_anything_is_created(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "run" / "link")
    workspace = Workspace(root=tmp_path / "run", paths={"deep": "link/deep"})
    with pytest.raises(SandboxConfigurationError, match="'deep' resolves outside the root"):
        workspace.open()
    assert not (tmp_path / "elsewhere" / "deep").exists()
    with pytest.raises(SandboxConfigurationError, match="failed to open"):
        workspace.open()


def test_a_directory_replaced_after_opening_fails_validation(tmp_path):
    workspace = Workspace(root=tmp_path / "run", paths={"out": "out"}).open()
    workspace.validate()
    os.rename(tmp_path / "run" / "out", tmp_path / "run" / "old-out")
    os.mkdir(tmp_path / "run" / "out")
    with pytest.raises(SandboxConfigurationError, match="'out'.*was replaced"):
        workspace.validate()


def test_a_directory_swapped_for_a_symlink_fails_validation(tmp_path):
    (tmp_path / "source").mkdir()
    (tmp_path / "secrets").mkdir()
    workspace = Workspace(root=tmp_path / "run", paths={"source": tmp_path / "source"}).open()
    os.rename(tmp_path / "source", tmp_path / "source-moved")
    os.symlink(tmp_path / "secrets", tmp_path / "source")
    with pytest.raises(SandboxConfigurationError, match="was replaced"):
        workspace.validate()


def test_a_removed_directory_fails_validation(tmp_path):
    workspace = Workspace(root=tmp_path / "run", paths={"out": "out"}).open()
    os.rmdir(tmp_path / "run" / "out")
    with pytest.raises(SandboxConfigurationError, match="no longer usable"):
        workspace.validate()


def test_validation_before_opening_is_an_error(tmp_path):
    with pytest.raises(SandboxConfigurationError, match="not open"):
        Workspace(root=tmp_path).validate()


def test_references_and_resolution_round_trip(tmp_path):
    (tmp_path / "source").mkdir()
    workspace = Workspace(root=tmp_path / "run", paths={"source": tmp_path / "source", "skills": "skills"}).open()
    root = workspace.real_path("root")
    assert workspace.reference(os.path.join(root, "notes", "today.md")) == "notes/today.md"
    assert workspace.reference(os.path.join(root, "skills", "refunds", "SKILL.md")) == (
        "workspace://skills/refunds/SKILL.md"
    )
    assert workspace.reference(str(tmp_path / "source")) == "workspace://source"
    assert workspace.resolve("workspace://skills/refunds/SKILL.md") == os.path.join(root, "skills/refunds/SKILL.md")
    assert workspace.resolve("notes/today.md") == os.path.join(root, "notes/today.md")
    assert workspace.resolve("workspace://source") == str(tmp_path / "source")


@pytest.mark.parametrize(
    ("reference", "error", "match"),
    [
        ("/etc/passwd", ValueError, "physical absolute path"),
        ("../outside", ValueError, "leaves its workspace path"),
        ("workspace://source/../../etc", ValueError, "leaves its workspace path"),
        ("workspace://nope/file", KeyError, "no path named 'nope'"),
        ("workspace://root/file", KeyError, "no path named 'root'"),
        ("", ValueError, "non-empty string"),
        ("a\0b", ValueError, "non-empty string"),
    ],
)
def test_bad_references_are_refused_with_a_clear_error(tmp_path, reference, error, match):
    (tmp_path / "source").mkdir()
    workspace = Workspace(root=tmp_path / "run", paths={"source": tmp_path / "source"}).open()
    with pytest.raises(error, match=match):
        workspace.resolve(reference)


def test_a_path_outside_the_workspace_has_no_reference(tmp_path):
    workspace = Workspace(root=tmp_path / "run").open()
    with pytest.raises(ValueError, match="not inside any path"):
        workspace.reference("/etc/passwd")


def test_the_child_environment_names_the_real_root_and_each_path(tmp_path):
    workspace = Workspace(root=tmp_path / "run", paths={"skills": "skills"}).open()
    assert workspace.environment() == {
        "LITTLE_GHOST_WORKSPACE_ROOT": str(tmp_path / "run"),
        "LITTLE_GHOST_WORKSPACE_SKILLS": str(tmp_path / "run" / "skills"),
    }


@pytest.mark.parametrize(
    ("paths", "match"),
    [
        ({"up": "../escape"}, "must stay beneath the root"),
        ({"same": "."}, "must stay beneath the root"),
        ({"root": "x"}, "'root' names the workspace root"),
        ({"Bad-Name": "x"}, "lower-case letters"),
        ({"empty": ""}, "is empty"),
    ],
)
def test_bad_declarations_are_refused_at_construction(tmp_path, paths, match):
    with pytest.raises(ValueError, match=match):
        Workspace(root=tmp_path, paths=paths)


def test_an_unknown_name_is_a_key_error(tmp_path):
    workspace = Workspace(root=tmp_path)
    with pytest.raises(KeyError, match="no path named 'missing'"):
        workspace.path("missing")


def test_providers_resolve_explicitly(tmp_path):
    assert Workspace.resolve_provider("directory") is Workspace
    with pytest.raises(KeyError, match="no workspace provider named 'cloud'"):
        Workspace.resolve_provider("cloud")
