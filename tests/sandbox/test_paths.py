"""PathSet, lookup roots and TrustedPath."""

from __future__ import annotations

import os

import pytest

from lg_core.lookup import Root
from lg_core.path_set import PathSet
from lg_core.trusted_path import TrustedPath


def test_a_path_set_keeps_search_order_and_never_changes(tmp_path):
    first = PathSet(["prompts", Root(tmp_path / "shared", boundary=tmp_path)])
    second = first + [tmp_path / "more"]
    assert [root.path for root in first] == [os.path.abspath("prompts"), str(tmp_path / "shared")]
    assert len(first) == 2 and len(second) == 3
    assert second.paths[-1] == Root(tmp_path / "more")
    assert first.paths[1].boundary == str(tmp_path)
    with pytest.raises(AttributeError, match="immutable"):
        first.extra = 1
    copied = first.to_a()
    copied.append(Root("x"))
    assert len(first) == 2


def test_a_lookup_root_expands_without_resolving_links(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert Root(tmp_path / "link").path == str(tmp_path / "link")
    with pytest.raises(ValueError, match="non-empty path"):
        Root("")


def test_a_path_set_refuses_other_values():
    with pytest.raises(TypeError, match="paths or lookup Roots"):
        PathSet([42])


def test_a_trusted_path_resolves_links_and_must_be_an_existing_directory(tmp_path):
    (tmp_path / "prompts").mkdir()
    os.symlink(tmp_path / "prompts", tmp_path / "link")
    assert TrustedPath(tmp_path / "link").path == str(tmp_path / "prompts")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        TrustedPath(tmp_path / "file.txt")
    with pytest.raises(ValueError, match="does not exist"):
        TrustedPath(tmp_path / "missing")
