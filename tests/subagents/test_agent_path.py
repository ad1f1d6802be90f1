"""Agent paths: model-chosen task names and the paths built from them are checked strictly."""

import pytest

from lg_core.errors import InvocationError
from lg_core.subagents.agent_path import MAX_DEPTH, ROOT, AgentPath, immediate_child, join, validate, validate_name


def test_join_puts_a_valid_name_directly_beneath_its_parent():
    assert AgentPath.join("/root", "review_api") == "/root/review_api"
    assert join("/root/review_api", "check_docs_2") == "/root/review_api/check_docs_2"
    assert AgentPath.ROOT == ROOT == "/root"


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "must not be empty"),
        ("Review", "only lowercase letters, digits and underscores"),
        ("review-api", "only lowercase letters, digits and underscores"),
        ("../etc", "only lowercase letters, digits and underscores"),
        ("a/b", "only lowercase letters, digits and underscores"),
        ("x" * 41, "longer than 40 characters"),
        (7, "must be a string, got int"),
    ],
)
def test_a_bad_task_name_is_refused_saying_what_is_wrong(name, problem):
    with pytest.raises(InvocationError, match=problem):
        validate_name(name)


def test_a_forty_character_name_of_digits_and_underscores_is_accepted():
    assert validate_name("0_" * 20) == "0_" * 20


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("root/a", "must start at '/root'"),
        ("/rooted", "must start at '/root'"),
        ("/root/", "must not be empty"),
        ("/root//a", "must not be empty"),
        ("/root/A", "only lowercase"),
        ("/root" + "/a" * (MAX_DEPTH + 1), "deeper than 8"),
        (None, "must be a string"),
    ],
)
def test_a_bad_path_is_refused(path, problem):
    with pytest.raises(InvocationError, match=problem):
        validate(path)


def test_validate_returns_a_valid_path_unchanged():
    assert validate("/root") == "/root"
    assert validate("/root" + "/a" * MAX_DEPTH) == "/root" + "/a" * MAX_DEPTH


def test_join_refuses_a_bad_parent_as_well_as_a_bad_name():
    with pytest.raises(InvocationError, match="must start at"):
        join("/home", "a")
    with pytest.raises(InvocationError, match="only lowercase"):
        join("/root", "A")


def test_immediate_child_is_exactly_one_level_beneath():
    assert immediate_child("/root/a", "/root")
    assert immediate_child("/root/a/b", "/root/a")
    assert not immediate_child("/root/a/b", "/root")
    assert not immediate_child("/root", "/root")
    assert not immediate_child("/root/ab", "/root/a")
