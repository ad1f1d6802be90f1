"""DataMap, Usage and StreamEvent: small values every run carries."""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import pickle
import re

import pytest

from lg_core import EVENT_TYPES, DataMap, InvocationError, Message, RunContext, StreamEvent, Usage
from lg_core.datamap import FrozenDataMap, to_json_value
from lg_core.events import LIVE_ONLY_EVENTS, TERMINAL_EVENTS


class Key(enum.Enum):
    ACCOUNT = "account"
    PLAN = "plan"


class Status(enum.Enum):
    OPEN = "open"


class IntKey(enum.IntEnum):
    ONE = 1


# -- DataMap -----------------------------------------------------------------------------


def test_keys_are_indifferent_strings():
    data = DataMap({Key.ACCOUNT: "a-1", 3: "three"}, plain="p")
    assert list(data) == ["account", "3", "plain"]
    assert data["account"] == data[Key.ACCOUNT] == "a-1"
    assert data[3] == data["3"] == "three"
    assert Key.ACCOUNT in data and "account" in data and 3 in data
    assert data.get(Key.PLAN) is None


def test_int_enum_keys_use_their_value():
    data = DataMap({IntKey.ONE: "x"})
    assert list(data) == ["1"]


def test_setting_and_deleting_with_enum_keys():
    data = DataMap()
    data[Key.PLAN] = {"status": "draft"}
    assert data["plan"]["status"] == "draft"
    del data[Key.PLAN]
    assert "plan" not in data
    assert len(data) == 0


def test_unhashable_or_odd_keys_are_not_contained_and_cannot_be_set():
    data = DataMap(a=1)
    assert (1, 2) not in data
    assert None not in data
    with pytest.raises(TypeError, match="DataMap keys must be strings, got tuple"):
        data[(1, 2)] = 1
    with pytest.raises(TypeError, match="got NoneType"):
        DataMap({None: 1})


def test_nested_mappings_become_datamaps():
    data = DataMap({"plan": {"steps": [{"name": "look"}, 2], "meta": {"k": Key.ACCOUNT}}})
    assert isinstance(data["plan"], DataMap)
    assert isinstance(data["plan"]["steps"][0], DataMap)
    assert data["plan"]["steps"][0]["name"] == "look"
    assert data["plan"]["meta"]["k"] == "account"


def test_enum_values_are_stored_as_their_json_value():
    data = DataMap(status=Status.OPEN, many=[Status.OPEN])
    assert data["status"] == "open"
    assert data.to_dict() == {"status": "open", "many": ["open"]}
    json.dumps(data.to_dict())


def test_tuples_are_stored_as_lists_of_wrapped_values():
    data = DataMap(items=({"x": 1}, 2))
    assert isinstance(data["items"], list)
    assert isinstance(data["items"][0], DataMap)
    assert data.to_dict() == {"items": [{"x": 1}, 2]}


def test_dig_walks_maps_and_lists():
    data = DataMap({"plan": {"steps": [{"name": "first"}, {"name": "second"}]}})
    assert data.dig("plan", "steps", 1, "name") == "second"
    assert data.dig("plan", "steps", -1, "name") == "second"
    assert data.dig("plan", "steps", 5, "name") is None
    assert data.dig("plan", "missing", "x") is None
    assert data.dig("missing") is None
    assert data.dig("plan", "steps", "name") is None  # a string index into a list
    assert data.dig(Key.PLAN, "steps", 0, "name") == "first"


def test_fetch_returns_default_or_names_available_keys():
    data = DataMap(b=1, a=2)
    assert data.fetch("a") == 2
    assert data.fetch("zzz", None) is None
    assert data.fetch("zzz", 0) == 0
    with pytest.raises(KeyError, match=r"key not found: 'zzz'; available keys: \['a', 'b'\]"):
        data.fetch("zzz")


def test_to_dict_is_a_plain_deep_copy():
    data = DataMap({"plan": {"steps": [{"name": "a"}]}})
    plain = data.to_dict()
    assert type(plain["plan"]) is dict
    assert type(plain["plan"]["steps"][0]) is dict
    plain["plan"]["steps"][0]["name"] = "changed"
    plain["plan"]["steps"].append("extra")
    assert data.dig("plan", "steps", 0, "name") == "a"
    assert len(data["plan"]["steps"]) == 1


def test_source_mapping_is_copied():
    source = {"nested": {"x": 1}, "items": [1]}
    data = DataMap(source)
    source["nested"]["x"] = 2
    source["items"].append(2)
    assert data.to_dict() == {"nested": {"x": 1}, "items": [1]}


def test_copy_is_independent():
    data = DataMap({"nested": {"x": 1}})
    clone = data.copy()
    clone["nested"]["x"] = 2
    assert data.dig("nested", "x") == 1


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (object(), "bad is a object"),
        ({"inner": {1, 2}}, r"bad\.inner is a set"),
        ([1, b"bytes"], r"bad\[1\] is a bytes"),
        (float("inf"), "bad is inf, which JSON cannot represent"),
        (float("nan"), "JSON cannot represent"),
    ],
)
def test_non_json_values_are_rejected_naming_the_path(value, match):
    data = DataMap()
    with pytest.raises(TypeError, match=match):
        data["bad"] = value
    assert "bad" not in data
    with pytest.raises(TypeError, match=match):
        DataMap(bad=value)


def test_equality_with_datamaps_and_mappings():
    data = DataMap({Key.ACCOUNT: {"a": [1]}})
    assert data == DataMap({"account": {"a": [1]}})
    assert data == {"account": {"a": [1]}}
    assert data == {Key.ACCOUNT: {"a": (1,)}}
    assert data != {"account": {"a": [2]}}
    assert data != {"account": object()}
    assert data != 5


def test_repr_shows_plain_data():
    assert repr(DataMap(a=1)) == "DataMap({'a': 1})"


def test_existing_datamap_value_is_kept():
    inner = DataMap(x=1)
    outer = DataMap(inner=inner)
    assert outer["inner"] is inner


@pytest.mark.parametrize(("value", "shown"), [("abc", "str 'abc'"), (5, "int 5"), ([1], "list [1]")])
def test_a_datamap_of_something_other_than_a_mapping_says_a_mapping_is_needed(value, shown):
    with pytest.raises(TypeError, match=f"DataMap needs a mapping .*, got {re.escape(shown)}"):
        DataMap(value)


@pytest.mark.parametrize("value", ["ab", 5, [1], [("a", 1, 2)]])
def test_update_with_neither_a_mapping_nor_pairs_says_what_it_takes(value):
    data = DataMap()
    with pytest.raises(TypeError, match="DataMap.update needs a mapping or \\(key, value\\) pairs"):
        data.update(value)
    data.update([("a", 1)])
    assert data == {"a": 1}


@pytest.mark.parametrize("state", ["abc", [1], 5])
def test_a_run_context_state_that_is_not_a_mapping_says_so(state):
    with pytest.raises(TypeError, match=f"RunContext state must be a mapping .*, got {type(state).__name__}"):
        RunContext(state=state)
    assert RunContext(state=None).state == {}


def test_to_json_value_checks_a_datamaps_contents_and_names_the_place_of_a_value_put_in_a_list_later():
    data = DataMap(items=[], plan={"status": Status.OPEN})
    assert to_json_value(data, path="state") == {"items": [], "plan": {"status": "open"}}
    data["items"].append({"when": object()})  # a plain list: DataMap does not see this
    with pytest.raises(TypeError, match=re.escape("state.items[0].when is a object")):
        to_json_value(data, path="state")
    with pytest.raises(TypeError, match=re.escape("state.x[1] is nan")):
        to_json_value({"x": [1, float("nan")]}, path="state")
    with pytest.raises(ValueError, match=re.escape("state.x has the keys 1 and '1'")):
        to_json_value({"x": {1: "a", "1": "b"}}, path="state")


# -- Usage ------------------------------------------------------------------------------


def test_usage_defaults_and_total():
    usage = Usage(
        input_tokens=10,
        output_tokens=5,
        cache_read_tokens=3,
        cache_write_tokens=2,
        reasoning_tokens=1,
    )
    assert usage.total_tokens == 21
    assert Usage().total_tokens == 0


@pytest.mark.parametrize("bad", [-1, -100, "abc", None, [], {}, float("nan"), float("inf"), float("-inf")])
def test_invalid_or_negative_counts_become_zero(bad):
    usage = Usage(input_tokens=bad, output_tokens=7)
    assert usage.input_tokens == 0
    assert usage.output_tokens == 7


@pytest.mark.parametrize(("value", "expected"), [("12", 12), (3.9, 3), (True, 1)])
def test_numeric_like_counts_are_converted(value, expected):
    assert Usage(reasoning_tokens=value).reasoning_tokens == expected


@pytest.mark.parametrize("name", ["prompt_tokens", "completion_tokens", "input_token"])
def test_an_unknown_token_count_name_raises_instead_of_counting_zero(name):
    """The spec's Usage.new takes exactly the five counts (an unknown keyword is an
    ArgumentError); OpenAI's prompt_tokens was silently dropped, recording 0 tokens."""
    with pytest.raises(TypeError, match=rf"{name}.*input_tokens"):
        Usage(**{name: 12})


def test_usage_addition():
    total = Usage(input_tokens=1, output_tokens=2) + Usage(input_tokens=10, cache_read_tokens=4)
    assert total == Usage(input_tokens=11, output_tokens=2, cache_read_tokens=4)
    assert sum([Usage(output_tokens=1)] * 3, Usage()).output_tokens == 3


def test_usage_cannot_be_added_to_other_types():
    with pytest.raises(TypeError):
        Usage() + 5
    with pytest.raises(TypeError):
        Usage() + {"input_tokens": 1}


def test_usage_to_dict_and_from_dict():
    usage = Usage(input_tokens=3, output_tokens=4)
    assert usage.to_dict() == {
        "input_tokens": 3,
        "output_tokens": 4,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "total_tokens": 7,
    }
    assert usage.to_h() == usage.to_dict()
    assert Usage.from_dict(usage.to_dict()) == usage  # total_tokens is derived, not read
    assert Usage.from_dict(None) == Usage()
    assert Usage.from_dict({"input_tokens": 2, "unknown": 5}) == Usage(input_tokens=2)


def test_a_usage_read_from_a_dict_or_added_behaves_as_a_constructed_one():
    read = Usage.from_dict({"input_tokens": 2, "output_tokens": 1, "total_tokens": 3})
    added = Usage(input_tokens=1) + Usage(input_tokens=1, output_tokens=1)
    built = Usage(input_tokens=2, output_tokens=1)
    for usage in (read, added):
        assert usage == built and hash(usage) == hash(built)
        assert usage.model_dump() == built.model_dump()
        assert copy.deepcopy(usage) == built and pickle.loads(pickle.dumps(usage)) == built
        assert usage.model_copy(update={"input_tokens": 5}).input_tokens == 5
        with pytest.raises(Exception, match="frozen"):
            usage.input_tokens = 5
    assert Usage.from_dict({"input_tokens": -1, "output_tokens": "3"}) == Usage(output_tokens=3)  # normalized


def test_usage_is_frozen():
    usage = Usage()
    with pytest.raises(Exception, match="frozen"):
        usage.input_tokens = 5


# -- StreamEvent --------------------------------------------------------------------------


def test_build_keeps_type_and_data():
    event = StreamEvent.build("text_delta", text="Hel")
    assert event.type == "text_delta"
    assert event.data["text"] == "Hel"
    assert event.seq is None


@pytest.mark.parametrize("bad", ["textDelta", "run_finished", "", "TEXT_DELTA"])
def test_build_rejects_unknown_types(bad):
    with pytest.raises(ValueError, match=f"unknown stream event type {bad!r}"):
        StreamEvent.build(bad)


def test_event_data_is_read_only():
    event = StreamEvent.build("usage", usage=Usage())
    with pytest.raises(TypeError):
        event.data["usage"] = None  # type: ignore[index]
    with pytest.raises(TypeError):
        del event.data["usage"]  # type: ignore[attr-defined]


def test_event_is_frozen():
    event = StreamEvent.build("message_start")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.type = "run_stop"  # type: ignore[misc]


def test_build_copies_keyword_data():
    payload = {"text": "a"}
    event = StreamEvent.build("text_delta", **payload)
    payload["text"] = "b"
    assert event.data["text"] == "a"


def test_with_seq_returns_a_new_event():
    event = StreamEvent.build("run_stop", response="done")
    numbered = event.with_seq(7)
    assert numbered.seq == 7 and event.seq is None
    assert numbered.type == "run_stop" and numbered.data["response"] == "done"


# Deltas and "start" markers are live-only; everything else is durable.
LIVE_ONLY = {
    "message_start",
    "text_delta",
    "reasoning_delta",
    "tool_call_start",
    "tool_call_delta",
    "tool_execution_start",
}
TERMINAL = {"run_stop", "run_error", "run_partial", "run_cancel"}


@pytest.mark.parametrize("name", sorted(EVENT_TYPES))
def test_terminal_and_durable_flags(name):
    event = StreamEvent.build(name)
    assert event.terminal is (name in TERMINAL)
    assert event.durable is (name not in LIVE_ONLY)


def test_terminal_events_map_one_per_outcome():
    assert TERMINAL_EVENTS == {
        "completed": "run_stop",
        "failed": "run_error",
        "partial": "run_partial",
        "cancelled": "run_cancel",
    }
    assert LIVE_ONLY_EVENTS == LIVE_ONLY
    assert not (LIVE_ONLY_EVENTS & TERMINAL)
    assert set(TERMINAL_EVENTS.values()) <= EVENT_TYPES


def test_event_types_are_the_spec_names():
    assert EVENT_TYPES >= {
        "message_start",
        "text_delta",
        "reasoning_delta",
        "tool_call_start",
        "tool_call_delta",
        "tool_call_stop",
        "usage",
        "message_stop",
        "invocation_start",
        "invocation_stop",
        "tool_execution_start",
        "tool_execution_stop",
    }


def test_repr_names_type_and_data():
    assert repr(StreamEvent.build("text_delta", text="x")) == "StreamEvent('text_delta', {'text': 'x'})"


@pytest.mark.parametrize(
    "round_trip", [copy.deepcopy, lambda event: pickle.loads(pickle.dumps(event))], ids=["deepcopy", "pickle"]
)
def test_an_event_survives_pickling_and_deep_copying_with_its_data_read_only(round_trip):
    error = InvocationError("bad input")
    event = StreamEvent.build(
        "run_error", outcome="failed", usage=Usage(input_tokens=3), error=error, items=[1, {"a": 2}]
    )
    event = event.with_stored({"outcome": "failed"}).with_seq(4)
    copied = round_trip(event)
    assert (copied.type, copied.seq, copied.id) == ("run_error", 4, None)
    assert copied.stored == {"outcome": "failed"}
    assert {**copied.data, "error": None} == {**event.data, "error": None}  # exceptions compare by identity
    assert type(copied.data["error"]) is InvocationError and str(copied.data["error"]) == "bad input"
    plain = StreamEvent.build("text_delta", text="Hello")
    assert round_trip(plain) == plain
    with pytest.raises(TypeError):
        copied.data["outcome"] = "completed"  # type: ignore[index]


# -- FrozenDataMap: a message's metadata ---------------------------------------------------------


class Channel(enum.Enum):
    KEY = "channel"


def test_frozen_data_map_reads_like_a_data_map_and_cannot_change():
    frozen = FrozenDataMap({"channel": "web", "tags": ["a", {"b": 1}]})

    assert frozen[Channel.KEY] == "web" and Channel.KEY in frozen
    assert frozen["tags"] == ("a", FrozenDataMap({"b": 1}))
    assert frozen == {"channel": "web", "tags": ["a", {"b": 1}]}
    assert frozen.to_dict() == {"channel": "web", "tags": ["a", {"b": 1}]}
    assert pickle.loads(pickle.dumps(frozen)) == frozen
    with pytest.raises(TypeError):
        frozen["channel"] = "api"  # type: ignore[index]
    with pytest.raises(AttributeError):
        frozen["tags"][1].update({"b": 2})
    with pytest.raises(TypeError, match="when"):
        FrozenDataMap({"when": object()})


def test_a_message_s_metadata_is_frozen_with_the_message():
    """The spec's Message: "Creates a frozen message ... Metadata becomes a frozen DataMap"."""
    message = Message(role="user", content="hi", metadata={Channel.KEY: "web", "path": ["a"]})

    assert isinstance(message.metadata, FrozenDataMap)
    assert message.metadata[Channel.KEY] == message.metadata["channel"] == "web"
    with pytest.raises(TypeError):
        message.metadata["channel"] = "mutated"  # type: ignore[index]
    assert json.loads(message.to_json())["metadata"] == {"channel": "web", "path": ["a"]}
    assert Message.from_dict(message.to_dict()) == message
    assert message.model_dump()["metadata"] == {"channel": "web", "path": ["a"]}


@pytest.mark.parametrize("key", [True, False, 7, 2.5])
def test_a_number_or_bool_key_is_stored_as_json_writes_it(key):
    assert list(DataMap({key: 1})) == list(json.loads(json.dumps({key: 1})))


def test_a_message_s_metadata_that_is_no_mapping_is_refused_naming_it():
    with pytest.raises(TypeError, match=r"^metadata must be a mapping such as \{'channel': 'web'\}, got int 5$"):
        Message(role="user", content="hi", metadata=5)
    with pytest.raises(TypeError, match=r"^metadata.when is a object"):
        Message(role="user", content="hi", metadata={"when": object()})
