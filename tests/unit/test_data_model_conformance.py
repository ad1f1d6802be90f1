"""Data model API pages of the spec (Message, Content, Invocation, DataMap, Run), checked against the Python face.

Each test names the spec point it checks (littleghost-docs-full.md).
"""

from __future__ import annotations

import copy
import enum
import json

import pytest

from lg_core import DataMap, InvocationError, Message, Text, ToolUse
from lg_core.content import from_dict, serialize
from lg_core.invocation import Invocation


class Key(enum.Enum):
    ACCOUNT = "account"


# -- DataMap ------------------------------------------------------------------------------------


def test_copy_copy_of_a_datamap_is_a_deep_independent_copy():
    """DataMap#initialize_copy: "Returns a deep independent DataMap copy." (dup/clone)."""
    original = DataMap({"plan": {"status": "active"}})
    shallow = copy.copy(original)
    shallow["extra"] = 1
    shallow["plan"]["status"] = "done"
    assert original.to_dict() == {"plan": {"status": "active"}}
    deep = copy.deepcopy(original)
    deep["plan"]["status"] = "done"
    assert original["plan"]["status"] == "active"


@pytest.mark.parametrize("mapping", [{Key.ACCOUNT: 1, "account": 2}, {1: "a", "1": "b"}])
def test_a_mapping_with_two_forms_of_one_key_is_ambiguous(mapping):
    """DataMap: "A mapping that supplies both a String and Symbol form of the same key is
    ambiguous and raises ArgumentError" (ValueError in Python)."""
    with pytest.raises(ValueError, match="ambiguous"):
        DataMap(mapping)
    with pytest.raises(ValueError, match="ambiguous"):
        DataMap({"nested": mapping})
    with pytest.raises(ValueError, match="ambiguous"):
        DataMap().update({"nested": [mapping]})


def test_ambiguous_keys_in_an_invocation_raise_invocation_error():
    with pytest.raises(InvocationError, match="ambiguous"):
        Invocation("hi", context={Key.ACCOUNT: 1, "account": 2})
    with pytest.raises(InvocationError, match="ambiguous"):
        Invocation("hi", metadata={"m": {Key.ACCOUNT: 1, "account": 2}})


def test_datamap_coerce_and_merge():
    """DataMap.coerce: "Returns value when it is already a DataMap, or normalizes a mapping";
    DataMap#merge: "Returns a normalized copy merged with other"."""
    existing = DataMap(a=1)
    assert DataMap.coerce(existing) is existing
    coerced = DataMap.coerce({"plan": {"status": "active"}})
    assert isinstance(coerced, DataMap) and isinstance(coerced["plan"], DataMap)
    merged = existing.merge({Key.ACCOUNT: {"id": 7}})
    assert merged == {"a": 1, "account": {"id": 7}}
    assert isinstance(merged["account"], DataMap)
    assert existing == {"a": 1}, "merge returns a copy"
    assert (existing | {"b": 2}) == {"a": 1, "b": 2}
    existing |= {"c": {"d": 1}}
    assert isinstance(existing, DataMap) and isinstance(existing["c"], DataMap)
    with pytest.raises(TypeError):
        existing.merge({"bad": object()})


# -- Message ------------------------------------------------------------------------------------


def test_message_to_json_encodes_its_dict_form():
    """Message#to_json: "Encodes #to_h as JSON, forwarding generator arguments"."""
    message = Message("user", ["hi", Text(text="!")], metadata={"channel": "web"})
    assert json.loads(message.to_json()) == message.to_dict()
    assert message.to_json(indent=2) == json.dumps(message.to_dict(), indent=2)
    assert Message.from_dict(json.loads(message.to_json())) == message


def test_message_roles_constant():
    """Message::ROLES: "Participant roles accepted by Message.new"."""
    assert Message.ROLES == ("system", "user", "assistant", "tool")


def test_a_serialized_message_with_string_content_is_normalized():
    """Message.new: "Strings become Content::Text blocks"; Message.coerce takes a hash."""
    expected = Message("user", "hello")
    assert Message.from_dict({"v": 1, "role": "user", "content": "hello"}) == expected
    assert Message.coerce({"v": 1, "role": "user", "content": ["hello"]}) == expected
    assert Invocation({"v": 1, "role": "user", "content": "hello"}).message == expected


# -- Content ------------------------------------------------------------------------------------


def test_tool_use_input_must_be_json_compatible():
    """ToolUse#input: "The object-shaped arguments supplied by the model as a DataMap"
    (DataMap values "are limited to JSON primitives, Arrays, and mappings")."""
    with pytest.raises(TypeError, match=r"input\.when is a object"):
        ToolUse(id="c1", name="lookup", input={"when": object()})
    block = ToolUse(id="c1", name="lookup", input={"q": [1, {"x": None}]})
    assert from_dict(json.loads(json.dumps(serialize(block)))) == block


# -- Invocation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", ["hi", ["message", "hi"], 5])
def test_invocation_from_a_non_mapping_payload_raises_invocation_error(payload):
    """Invocation.new: "The payload must be a Hash"; "Invalid payloads ... raise InvocationError"."""
    with pytest.raises(InvocationError, match="mapping"):
        Invocation.from_dict(payload)


def test_invalid_invocation_keys_raise_invocation_error():
    """Invocation: "Invalid payloads, messages, keys, or deadlines raise InvocationError"."""
    invocation = Invocation("hi")
    with pytest.raises(InvocationError, match="key"):
        invocation[object()] = 1
    with pytest.raises(InvocationError, match="key"):
        invocation[None]
    with pytest.raises(InvocationError, match="key"):
        Invocation.from_dict({"message": "hi", ("a", "b"): 1})
    assert Invocation.from_dict({"message": "hi", Key.ACCOUNT: "a-1"})["account"] == "a-1"


def test_an_environment_mapping_passed_as_the_message_names_the_keyword_form():
    """Invocation.new(env): a whole environment passed positionally gets an actionable error."""
    with pytest.raises(InvocationError, match=r"Invocation\.from_dict"):
        Invocation({"message": "hi", "account_id": "a-1"})
    assert Invocation.from_dict({"message": "hi", "account_id": "a-1"}).account_id == "a-1"


# -- Run ------------------------------------------------------------------------------------------


def test_run_says_whether_it_includes_agent_events():
    """Run#include_agent_events?: whether the stream includes every Agent's contextual events
    (off by default for a standalone entrypoint, on for a composite assembly, lg_core.agent_stream)."""
    from lg_core.run import Run

    run = Run(object, Invocation("hi"), runtime=None)
    assert run.include_agent_events is False
