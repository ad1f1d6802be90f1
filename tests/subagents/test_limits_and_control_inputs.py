"""The manager's bounds and the control tools' inputs: a model's bad call becomes one sentence."""

import pytest

from lg_core.errors import ConfigurationError, InvocationError
from lg_core.subagents.control_inputs import (
    CONTROL_TOOL_NAMES,
    LIST,
    SEND,
    SPAWN,
    WAIT,
    SpawnInput,
    input_schema,
    parse_input,
)
from lg_core.subagents.limits import DEFAULT_WAIT_TIMEOUT, ManagerLimits

LIMITS = ManagerLimits(max_message_chars=50)


def test_the_default_limits_are_bounded_and_the_wait_lasts_thirty_seconds():
    limits = ManagerLimits()
    assert DEFAULT_WAIT_TIMEOUT == 30.0
    assert all(value > 0 for value in (limits.max_concurrent, limits.max_turns, limits.max_message_chars))


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"max_concurrent": 0}, "max_concurrent must be a positive integer"),
        ({"max_turns": 2.5}, "max_turns must be a positive integer"),
        ({"max_identities": True}, "max_identities must be a positive integer"),
        ({"wait_timeout": 5}, "'wait_timeout' is not accepted: .* subagent_long_poll_duration; set that"),
        ({"close_timeout": 10}, "'close_timeout' is not accepted: .* nothing waits for them to close"),
        ({"max_children": 2}, "unknown subagent limit 'max_children'; the limits are max_concurrent"),
    ],
)
def test_a_bad_limit_is_refused_naming_it(values, problem):
    with pytest.raises(ConfigurationError, match=problem):
        ManagerLimits.from_mapping(values)


def test_limits_from_a_mapping_keep_the_defaults_they_do_not_name():
    limits = ManagerLimits.from_mapping({"max_concurrent": 2, "max_message_chars": 500})
    assert (limits.max_concurrent, limits.max_message_chars, limits.max_turns) == (2, 500, ManagerLimits().max_turns)
    assert ManagerLimits.from_mapping(None) == ManagerLimits()


def test_a_spawn_is_parsed_with_async_as_its_default_mode():
    parsed = parse_input(SPAWN, {"kind": "research", "task_name": "review_api", "task": "Check it"}, LIMITS)
    assert parsed == SpawnInput(kind="research", task_name="review_api", task="Check it", mode="async")


@pytest.mark.parametrize(
    ("tool", "arguments", "problem"),
    [
        (SPAWN, {"kind": "research", "task_name": "Review API", "task": "x"}, "only lowercase letters"),
        (SPAWN, {"kind": "legal", "task_name": "a", "task": "x"}, "unknown kind 'legal'; the kinds are research"),
        (SPAWN, {"kind": "research", "task_name": "a"}, "task: Field required"),
        (SPAWN, {"kind": "research", "task_name": "a", "task": "x", "mode": "later"}, "mode: Input should be"),
        (SPAWN, {"kind": "research", "task_name": "a", "task": "x", "extra": 1}, "extra: Extra inputs"),
        (SPAWN, {"kind": "research", "task_name": "a", "task": "x" * 51}, "51 characters; at most 50"),
        (SEND, {"subagent_id": "/root/a", "message": "y" * 51}, "51 characters; at most 50"),
        (WAIT, {"subagent_ids": "/root/a"}, "subagent_ids: Input should be a valid list"),
        (LIST, {"limit": 1000}, "limit: Input should be less than or equal to 100"),
        (SPAWN, "not an object", "input: Input should be a valid dictionary"),
        ("spawn", {}, "'spawn' is not a subagent tool"),
    ],
)
def test_a_bad_control_call_is_one_sentence_for_the_model(tool, arguments, problem):
    with pytest.raises(InvocationError, match=problem) as caught:
        parse_input(tool, arguments, LIMITS, kinds=["research"])
    assert str(caught.value).count("\n") == 0


def test_the_schemas_shown_to_the_model_match_what_is_accepted():
    schema = input_schema(SPAWN, kinds=["research", "review"])
    assert schema["properties"]["kind"]["enum"] == ["research", "review"]
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"kind", "task_name", "task"}
    for name in CONTROL_TOOL_NAMES:
        assert input_schema(name)["type"] == "object"
