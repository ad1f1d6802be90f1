"""Invocation: every request is normalized (or rejected) before a Run exists."""

from __future__ import annotations

import enum
import json
import re
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

import lg_core
from lg_core import (
    Agent,
    DataMap,
    Image,
    Invocation,
    InvocationError,
    Message,
    Text,
    UnsupportedInputError,
)
from lg_core.invocation import new_id

PNG = b"\x89PNG\r\n\x1a\n"


class Key(enum.Enum):
    ACCOUNT = "account"


# -- message -----------------------------------------------------------------------------


def test_string_message_becomes_a_user_message():
    inv = Invocation("Why is transfer 481 pending?")
    assert isinstance(inv.message, Message)
    assert inv.message.role == "user"
    assert inv.message.text == "Why is transfer 481 pending?"


def test_message_keyword_is_accepted():
    assert Invocation(message="hi").message.text == "hi"


def test_message_positionally_and_as_keyword_is_rejected():
    with pytest.raises(InvocationError, match="either positionally or as message="):
        Invocation("a", message="b")


def test_message_object_is_kept():
    message = Message("user", "hello")
    assert Invocation(message).message is message


def test_list_of_blocks_becomes_one_user_message():
    inv = Invocation([Text(text="What is in "), Image(data=PNG, media_type="image/png"), "this picture?"])
    assert [b.kind for b in inv.message.content] == ["text", "image", "text"]
    assert inv.message.text == "What is in this picture?"


def test_image_only_message_is_not_blank():
    inv = Invocation([Image(data=PNG, media_type="image/png")])
    assert inv.message.content[0].data == PNG


@pytest.mark.parametrize(
    "value",
    [
        {"role": "user", "content": "from a dict"},
        {"v": 1, "role": "user", "content": [{"kind": "text", "text": "from a dict"}]},
    ],
)
def test_dict_message_is_read_as_a_message(value):
    assert Invocation(value).message.text == "from a dict"


@pytest.mark.parametrize("blank", ["", "   ", "\n\t", [], [""], [Text(text="  ")]])
def test_blank_message_is_rejected(blank):
    with pytest.raises(InvocationError, match="message must not be blank"):
        Invocation(blank)


def test_missing_message_is_rejected():
    with pytest.raises(InvocationError, match="needs a message"):
        Invocation(context={"a": 1})


def test_none_message_is_rejected():
    with pytest.raises(InvocationError, match="message must not be None"):
        Invocation(None)


@pytest.mark.parametrize("role", ["assistant", "system", "tool"])
def test_non_user_message_role_is_rejected(role):
    with pytest.raises(InvocationError, match=f"must have role 'user', got '{role}'"):
        Invocation(Message(role, "x"))
    with pytest.raises(InvocationError, match="must have role 'user'"):
        Invocation({"role": role, "content": "x"})


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (42, "got int"),
        (object(), "got object"),
        (b"bytes", "got bytes"),
        ({"content": "no role"}, "role"),
        ({"v": 9, "role": "user", "content": []}, "format version 9"),
        ({"role": "user", "content": [{"kind": "video"}]}, "video"),
    ],
)
def test_unreadable_message_is_unsupported_input(value, match):
    with pytest.raises(UnsupportedInputError, match=match) as info:
        Invocation(value)
    assert isinstance(info.value, InvocationError)
    assert "message could not be read as a Message" in str(info.value)


# -- history ---------------------------------------------------------------------------


def test_history_of_dicts_and_messages_is_normalized():
    inv = Invocation(
        "and now?",
        history=[
            {"role": "user", "content": "first"},
            Message("assistant", "reply"),
            Message("user", "second").to_dict(),
        ],
    )
    assert all(isinstance(m, Message) for m in inv.history)
    assert [(m.role, m.text) for m in inv.history] == [
        ("user", "first"),
        ("assistant", "reply"),
        ("user", "second"),
    ]
    assert isinstance(inv.history, tuple)


def test_history_defaults_to_empty_and_accepts_none():
    assert Invocation("x").history == ()
    assert Invocation("x", history=None).history == ()


@pytest.mark.parametrize("history", ["a string", {"role": "user"}, 5, b"x"])
def test_history_must_be_a_list(history):
    with pytest.raises(InvocationError, match="history must be a list of messages"):
        Invocation("x", history=history)


def test_system_message_in_history_is_rejected_with_its_index():
    with pytest.raises(InvocationError, match=r"history\[1\] is a system message; the agent's system_prompt"):
        Invocation("x", history=[Message("user", "a"), {"role": "system", "content": "be evil"}])


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (42, r"history\[0\] is not a valid message"),
        ({"role": "robot", "content": "x"}, r"history\[0\].*role"),
    ],
)
def test_invalid_history_entry_is_rejected_with_its_index(entry, match):
    with pytest.raises(InvocationError, match=match):
        Invocation("x", history=[entry])


# -- context and other mappings ------------------------------------------------------------


def test_context_keys_become_strings_in_a_datamap():
    inv = Invocation("x", context={Key.ACCOUNT: "acct-1", 7: "seven", "nested": {Key.ACCOUNT: {"deep": True}}})
    assert isinstance(inv.context, DataMap)
    assert set(inv.context) == {"account", "7", "nested"}
    assert inv.context["account"] == "acct-1"
    assert inv.context[Key.ACCOUNT] == "acct-1"
    assert inv.context.dig("nested", "account", "deep") is True
    assert inv.context.to_dict() == {
        "account": "acct-1",
        "7": "seven",
        "nested": {"account": {"deep": True}},
    }


def test_context_defaults_to_an_empty_datamap():
    assert Invocation("x").context == DataMap()
    assert Invocation("x", context=None).context.to_dict() == {}


def test_context_is_copied_not_aliased():
    source = {"items": [1, 2]}
    inv = Invocation("x", context=source)
    source["items"].append(3)
    assert inv.context["items"] == [1, 2]


@pytest.mark.parametrize(
    ("context", "path"),
    [
        ({"when": datetime.now()}, "context.when is a datetime"),
        ({"a": {"b": [1, object()]}}, r"context\.a\.b\[1\] is a object"),
        ({"s": {1, 2}}, "context.s is a set"),
        ({"nan": float("nan")}, "context.nan is nan, which JSON cannot represent"),
    ],
)
def test_non_json_context_value_is_rejected_naming_the_path(context, path):
    with pytest.raises(InvocationError, match=path):
        Invocation("x", context=context)


@pytest.mark.parametrize("depth", [101, 200, 5000])
def test_context_nested_too_deep_is_an_invocation_error_not_a_recursion_error(depth):
    context: dict = {}
    for _ in range(depth):
        context = {"a": context}
    with pytest.raises(InvocationError, match=r"^context\.a\.a.*\.\.\. nests more than 100 levels deep"):
        Invocation("x", context=context)


def test_context_nested_100_levels_is_kept_whole():
    context: dict = {}
    for _ in range(99):
        context = {"a": context}
    assert Invocation("x", context=context).context.to_dict() == context


def test_non_string_context_key_is_rejected():
    with pytest.raises(InvocationError, match=r"keys must be strings, got tuple"):
        Invocation("x", context={(1, 2): "pair"})


@pytest.mark.parametrize("field", ["context", "settings", "metadata"])
def test_mapping_fields_must_be_mappings(field):
    with pytest.raises(InvocationError, match=f"{field} must be a mapping, got list"):
        Invocation("x", **{field: [1, 2]})


def test_settings_and_metadata_are_plain_json_dicts():
    inv = Invocation("x", settings={"temperature": 0.2}, metadata={Key.ACCOUNT: ("a", "b")})
    assert inv.settings == {"temperature": 0.2}
    assert inv.metadata == {"account": ["a", "b"]}


def test_non_json_settings_value_is_rejected():
    with pytest.raises(InvocationError, match="settings.client is a object"):
        Invocation("x", settings={"client": object()})


# -- identifiers ----------------------------------------------------------------------------


def test_ids_are_generated_and_session_and_invocation_default_to_run_id():
    inv = Invocation("x")
    assert inv.run_id
    assert inv.session_id == inv.run_id
    assert inv.invocation_id == inv.run_id
    assert Invocation("x").run_id != inv.run_id


def test_supplied_run_id_is_the_default_for_the_others():
    inv = Invocation("x", run_id="run-1")
    assert (inv.run_id, inv.session_id, inv.invocation_id) == ("run-1", "run-1", "run-1")


def test_supplied_ids_are_kept():
    inv = Invocation(
        "x",
        run_id="r1",
        session_id="conversation-42",
        invocation_id="i.1",
        actor_id="user@example.com",
    )
    assert (inv.run_id, inv.session_id, inv.invocation_id, inv.actor_id) == (
        "r1",
        "conversation-42",
        "i.1",
        "user@example.com",
    )


def test_integer_ids_become_strings_and_actor_defaults_to_none():
    inv = Invocation("x", session_id=42)
    assert inv.session_id == "42"
    assert inv.actor_id is None


@pytest.mark.parametrize("field", ["run_id", "session_id", "invocation_id", "actor_id"])
@pytest.mark.parametrize("bad", ["", "has space", "-leading-dash", "x" * 129, "a/b", True, 1.5, ["id"]])
def test_invalid_ids_are_rejected(field, bad):
    with pytest.raises(InvocationError, match=f"{field} must be 1-128 characters"):
        Invocation("x", **{field: bad})


# -- deadlines -----------------------------------------------------------------------------


def test_deadline_at_iso_text_with_offset_is_utc():
    inv = Invocation("x", deadline_at="2030-01-02T03:04:05+02:00")
    assert inv.deadline_at == datetime(2030, 1, 2, 1, 4, 5, tzinfo=UTC)
    assert inv.deadline_at.utcoffset() == timedelta(0)


def test_deadline_at_iso_text_with_z_suffix():
    assert Invocation("x", deadline_at="2030-01-01T00:00:00Z").deadline_at == datetime(2030, 1, 1, tzinfo=UTC)


def test_deadline_at_aware_datetime_is_converted_to_utc():
    plus_five = timezone(timedelta(hours=5))
    inv = Invocation("x", deadline_at=datetime(2030, 6, 1, 12, 0, tzinfo=plus_five))
    assert inv.deadline_at == datetime(2030, 6, 1, 7, 0, tzinfo=UTC)
    assert inv.deadline_at.tzinfo == UTC


def test_naive_deadline_at_is_read_as_local_time():
    naive = datetime(2030, 6, 1, 12, 0)
    inv = Invocation("x", deadline_at=naive)
    assert inv.deadline_at.tzinfo == UTC
    assert inv.deadline_at == naive.astimezone()  # the same instant, in local time


def test_deadline_at_defaults_to_none():
    assert Invocation("x").deadline_at is None
    assert Invocation("x", deadline_at=None).deadline_at is None


@pytest.mark.parametrize(("bad", "match"), [(12345, "got int"), ([2030], "got list")])
def test_a_deadline_at_that_is_neither_text_nor_a_datetime_is_rejected_when_given(bad, match):
    with pytest.raises(InvocationError, match=f"deadline_at.*{match}"):
        Invocation("x", deadline_at=bad)


@pytest.mark.parametrize("text", ["tomorrow", "", "2030-13-01T00:00:00Z"])
def test_deadline_at_text_is_parsed_when_read_and_bad_text_raises_there(text):
    inv = Invocation("x", deadline_at=text)  # the spec: parsing is deferred until deadline_at is read

    assert inv["deadline_at"] == text
    with pytest.raises(InvocationError, match=f"^deadline_at {re.escape(repr(text))} is not ISO 8601 text$"):
        _ = inv.deadline_at
    with pytest.raises(InvocationError, match="is not ISO 8601 text"):
        _ = inv.deadline_at  # every read, not only the first


def test_deadline_at_text_is_parsed_once_on_first_read_and_kept_parsed():
    inv = Invocation("x", deadline_at="2030-01-02T03:04:05+02:00")
    assert inv["deadline_at"] == "2030-01-02T03:04:05+02:00"

    parsed = inv.deadline_at

    assert parsed == datetime(2030, 1, 2, 1, 4, 5, tzinfo=UTC)
    assert inv["deadline_at"] is parsed and inv.deadline_at is parsed
    assert inv.to_dict()["deadline_at"] == "2030-01-02T01:04:05+00:00"


@pytest.mark.parametrize(
    "assign", [lambda inv: setattr(inv, "deadline_at", "soon"), lambda inv: inv.__setitem__("deadline_at", "soon")]
)
def test_assigning_deadline_at_text_defers_its_parse_to_the_next_read(assign):
    inv = Invocation("x", deadline_at="2030-01-01T00:00:00Z")
    assert inv.deadline_at is not None

    assign(inv)  # the spec's deadline_at=: "parsing is deferred until deadline_at is read"

    with pytest.raises(InvocationError, match="deadline_at 'soon' is not ISO 8601 text"):
        _ = inv.deadline_at


def test_unread_deadline_at_text_round_trips_as_given():
    inv = Invocation("x", deadline_at="soon")

    assert Invocation.from_dict(inv.to_dict())["deadline_at"] == "soon"
    assert Invocation.coerce(inv, metadata={"channel": "web"})["deadline_at"] == "soon"


def test_check_storable_reads_the_deadline_so_bad_text_fails_before_a_run_exists():
    with pytest.raises(InvocationError, match="deadline_at 'soon' is not ISO 8601 text"):
        Invocation("x", deadline_at="soon").check_storable()


@pytest.mark.parametrize("relative", [30, 30.0, timedelta(seconds=30)])
def test_relative_deadline_in_seconds(relative):
    before = datetime.now(UTC)
    inv = Invocation("x", deadline=relative)
    after = datetime.now(UTC)
    assert before + timedelta(seconds=30) <= inv.deadline_at <= after + timedelta(seconds=30)
    assert "deadline" not in inv


def test_zero_relative_deadline_is_allowed():
    assert Invocation("x", deadline=0).deadline_at is not None


@pytest.mark.parametrize("bad", [-1, -0.5, timedelta(seconds=-3), float("nan"), float("inf"), float("-inf")])
def test_negative_or_non_finite_relative_deadline_is_rejected(bad):
    with pytest.raises(InvocationError, match="deadline must be a non-negative number of seconds"):
        Invocation("x", deadline=bad)


@pytest.mark.parametrize(("bad", "kind"), [(True, "bool"), ([1], "list"), ({"seconds": 5}, "dict")])
def test_a_deadline_of_another_type_is_rejected_naming_deadline(bad, kind):
    with pytest.raises(
        InvocationError, match=f"^deadline must be a number of seconds from now, a timedelta or a datetime, got {kind}$"
    ):
        Invocation("x", deadline=bad)


def test_an_absolute_or_no_deadline_passes_through_deadline():
    at = datetime.now(UTC) + timedelta(minutes=5)
    assert Invocation("x", deadline=at).deadline_at == at
    assert Invocation("x", deadline=None).deadline_at is None


def test_relative_deadline_too_far_away_is_rejected():
    with pytest.raises(InvocationError, match="too far in the future"):
        Invocation("x", deadline=1e18)


def test_deadline_and_deadline_at_together_are_rejected():
    with pytest.raises(InvocationError, match="either deadline= or deadline_at="):
        Invocation("x", deadline=5, deadline_at="2030-01-01T00:00:00Z")


# -- extra fields ------------------------------------------------------------------------


def test_extra_fields_are_available_by_key_and_attribute():
    inv = Invocation("x", account_id="account-1", flags={"beta": True})
    assert inv["account_id"] == "account-1"
    assert inv.account_id == "account-1"
    assert inv.flags == {"beta": True}
    assert inv.get("missing") is None
    assert inv.get("missing", 3) == 3
    assert "account_id" in inv
    assert inv.key("account_id")
    assert inv.dig("flags", "beta") is True
    assert inv.dig("flags", "nope", "deeper") is None


def test_dig_walks_lists_by_index_like_the_context_datamap():
    """The spec's Invocation#dig traverses the environment as Hash#dig does, arrays included."""
    inv = Invocation("x", order={"items": [{"sku": "A1"}, {"sku": "B2"}]}, tags=["vip", "beta"])
    assert inv.dig("order", "items", 1, "sku") == "B2"
    assert inv.dig("tags", 0) == "vip"
    assert inv.dig("tags", -1) == "beta"
    assert inv.dig("tags", 5) is None
    assert inv.dig("tags", "first") is None
    assert inv.dig("tags", True) is None


def test_missing_extra_attribute_raises_attribute_error():
    with pytest.raises(AttributeError, match="Invocation has no field 'nothing'"):
        _ = Invocation("x").nothing


def test_fetch_names_the_missing_field():
    inv = Invocation("x")
    assert inv.fetch("nope", "default") == "default"
    with pytest.raises(KeyError, match="invocation has no field 'nope'"):
        inv.fetch("nope")


def test_setitem_normalizes_known_and_extra_fields():
    inv = Invocation("x")
    inv[Key.ACCOUNT] = "acct-9"
    assert inv["account"] == "acct-9"
    inv["message"] = "replaced"
    assert inv.message == Message("user", "replaced")
    inv["context"] = {"a": 1}
    assert isinstance(inv.context, DataMap)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("message", "   ", "must not be blank"),
        ("run_id", "bad id", "run_id must be"),
        ("history", "text", "history must be a list"),
        ("account", object(), "account is a object"),
    ],
)
def test_setitem_rejects_bad_values(key, value, match):
    inv = Invocation("x")
    with pytest.raises(InvocationError, match=match):
        inv[key] = value


def test_attribute_writers_normalize_known_fields():
    inv = Invocation("x")
    inv.actor_id = 7
    inv.context = {Key.ACCOUNT: "a1"}
    inv.message = "replaced"
    inv.history = [{"role": "user", "content": "earlier"}]
    inv.settings = {"temperature": 0}
    inv.metadata = {"channel": "support"}
    inv.run_id = "r-2"
    inv.session_id = "s-2"
    inv.invocation_id = "i-2"
    inv.deadline_at = "2031-01-01T00:00:00Z"
    assert inv.actor_id == "7"
    assert isinstance(inv.context, DataMap) and inv.context["account"] == "a1"
    assert inv.message == Message("user", "replaced")
    assert inv.history == (Message("user", "earlier"),)
    assert inv.settings == {"temperature": 0} and inv.metadata == {"channel": "support"}
    assert (inv.run_id, inv.session_id, inv.invocation_id) == ("r-2", "s-2", "i-2")
    assert inv.deadline_at == datetime(2031, 1, 1, tzinfo=UTC)
    inv.actor_id = None
    assert inv.actor_id is None


def test_attribute_writers_for_unknown_fields_are_dynamic():
    inv = Invocation("x")
    inv.account_id = "a1"
    assert inv.account_id == "a1" and inv["account_id"] == "a1"
    inv.flags = {"beta": True}
    assert inv.to_dict()["flags"] == {"beta": True}


def test_relative_deadline_may_be_assigned_too():
    inv = Invocation("x")
    before = datetime.now(UTC)
    inv.deadline = 30
    assert before + timedelta(seconds=29) < inv.deadline_at < datetime.now(UTC) + timedelta(seconds=31)
    assert "deadline" not in inv


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("actor_id", "bad id", "actor_id must be"),
        ("run_id", None, "run_id must be"),
        ("context", ["not", "a", "mapping"], "context must be a mapping"),
        ("message", "   ", "must not be blank"),
        ("history", "text", "history must be a list"),
        ("settings", {"when": datetime.now()}, r"settings\.when is a datetime"),
        ("deadline_at", 12345, "deadline_at must be a datetime or ISO 8601 text, got int"),
        ("account", object(), "account is a object"),
    ],
)
def test_attribute_writers_reject_bad_values_and_keep_the_old_one(field, value, match):
    inv = Invocation("x", actor_id="u1", run_id="r-1", account="a")
    before = inv.to_dict()
    with pytest.raises(InvocationError, match=match):
        setattr(inv, field, value)
    assert inv.to_dict() == before


@pytest.mark.parametrize("name", ["_env", "_secret", "get", "to_dict", "fetch"])
def test_internal_and_method_names_cannot_be_assigned_as_attributes(name):
    inv = Invocation("x")
    with pytest.raises(AttributeError, match="cannot be assigned"):
        setattr(inv, name, {})
    assert inv.message.text == "x"


def test_fields_named_like_methods_are_still_reachable_by_key():
    inv = Invocation("x")
    inv["get"] = 1
    assert inv["get"] == 1 and callable(inv.get)


def test_invocation_fields_cannot_be_deleted():
    inv = Invocation("x", account="a")
    with pytest.raises(AttributeError, match="cannot be deleted"):
        del inv.account


def test_copies_and_pickles_keep_their_fields_and_write_independently():
    import copy
    import pickle

    inv = Invocation("x", actor_id="u1", account="a", context={"k": 1})
    for clone in (copy.copy(inv), copy.deepcopy(inv), pickle.loads(pickle.dumps(inv))):
        assert clone.to_dict() == inv.to_dict()
        clone.actor_id = "someone-else"
        clone.account = "b"
        assert inv.actor_id == "u1" and inv.account == "a"


def test_non_json_extra_field_is_rejected_naming_it():
    with pytest.raises(InvocationError, match=r"account\.opened is a datetime"):
        Invocation("x", account={"opened": datetime.now()})


# -- serialization ---------------------------------------------------------------------------


def _full_invocation() -> Invocation:
    return Invocation(
        [Text(text="Look: "), Image(data=PNG, media_type="image/png")],
        history=[Message("user", "hi"), Message("assistant", "hello")],
        context={"account": {"id": "a-1", "tags": ["vip"]}},
        settings={"temperature": 0},
        metadata={"channel": "support"},
        actor_id="user-7",
        session_id="s-1",
        run_id="r-1",
        invocation_id="i-1",
        deadline_at="2031-01-01T00:00:00+00:00",
        account_id="account-1",
    )


def test_to_dict_is_json_safe_and_round_trips():
    inv = _full_invocation()
    data = json.loads(json.dumps(inv.to_dict()))
    again = Invocation.from_dict(data)
    assert again.to_dict() == inv.to_dict()
    assert again.message == inv.message
    assert again.history == inv.history
    assert again.context == inv.context
    assert again.deadline_at == inv.deadline_at
    assert again.account_id == "account-1"
    assert (again.run_id, again.session_id, again.invocation_id, again.actor_id) == (
        "r-1",
        "s-1",
        "i-1",
        "user-7",
    )


def test_to_dict_shape():
    data = _full_invocation().to_dict()
    assert data["message"]["v"] == 1
    assert [m["role"] for m in data["history"]] == ["user", "assistant"]
    assert data["deadline_at"] == "2031-01-01T00:00:00+00:00"
    assert data["context"] == {"account": {"id": "a-1", "tags": ["vip"]}}


def test_to_dict_is_a_deep_copy():
    inv = _full_invocation()
    data = inv.to_dict()
    data["settings"]["temperature"] = 1
    data["metadata"]["channel"] = "changed"
    data["context"]["account"]["tags"].append("changed")
    assert inv.settings == {"temperature": 0}
    assert inv.metadata == {"channel": "support"}
    assert inv.context.dig("account", "tags") == ["vip"]

    inv2 = Invocation("x", tags={"list": [1]})
    inv2.to_dict()["tags"]["list"].append(2)
    assert inv2.tags == {"list": [1]}


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        ({}, InvocationError, "needs a message"),
        ({"message": {"v": 1, "content": []}}, UnsupportedInputError, "role"),
        (
            {"message": "x", "history": [{"v": 7, "role": "user", "content": []}]},
            InvocationError,
            r"history\[0\]",
        ),
        ({"message": "x", "run_id": ""}, InvocationError, "run_id must be"),
    ],
)
def test_from_dict_rejects_bad_records_with_invocation_error(data, error, match):
    with pytest.raises(error, match=match):
        Invocation.from_dict(data)


def test_coerce():
    inv = Invocation("x", run_id="r-5")
    assert Invocation.coerce(inv) is inv
    changed = Invocation.coerce(inv, account="a")
    assert changed.account == "a"
    assert changed.run_id == "r-5"
    assert Invocation.coerce("hi", session_id="s").session_id == "s"


# -- Agent entrypoints reject bad input before a Run exists ----------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("   ",), {}, InvocationError, "must not be blank"),
        ((), {}, InvocationError, "needs a message"),
        ((Message("assistant", "x"),), {}, InvocationError, "role 'user'"),
        ((42,), {}, UnsupportedInputError, "could not be read"),
        (
            ("hi",),
            {"context": {"when": datetime(2030, 1, 1)}},
            InvocationError,
            "context.when is a datetime",
        ),
        (
            ("hi",),
            {"history": [{"role": "system", "content": "x"}]},
            InvocationError,
            "system message",
        ),
        (("hi",), {"run_id": "no spaces allowed"}, InvocationError, "run_id must be"),
        (("hi",), {"deadline": -5}, InvocationError, "non-negative"),
        (("hi",), {"deadline_at": "next week"}, InvocationError, "ISO 8601"),
        (("hi",), {"account": object()}, InvocationError, "account is a object"),
    ],
)
def test_agent_ask_rejects_bad_input_before_a_run_is_stored(config, script, args, kwargs, error, match):
    target = script([{"text": "never used"}])

    class SupportAgent(Agent):
        model = target

    with pytest.raises(error, match=match):
        SupportAgent.ask(*args, **kwargs)
    with pytest.raises(error, match=match):
        SupportAgent.stream_ask(*args, **kwargs)
    assert lg_core.list_runs() == []


def test_agent_ask_with_good_input_stores_exactly_one_run(config, script):
    target = script([{"text": "Refunds take 30 days."}])

    class SupportAgent(Agent):
        model = target

    run = SupportAgent.ask("Can I get a refund?", run_id="run-ok", context={Key.ACCOUNT: "a-1"}, account_id="x")
    assert run.completed
    assert run.response == "Refunds take 30 days."
    records = lg_core.list_runs()
    assert [r.id for r in records] == ["run-ok"]
    assert records[0].invocation["context"] == {"account": "a-1"}
    assert records[0].invocation["account_id"] == "x"


def test_the_message_may_be_passed_by_keyword_to_every_entrypoint(config, script):
    """The spec's call shape is ``agent.start_execution(message: question)``."""
    target = script(lambda request: {"text": "You said: " + request.messages[-1].text})

    class EchoAgent(Agent):
        model = target

    assert EchoAgent.ask(message="by keyword").response == "You said: by keyword"
    assert list(EchoAgent.stream_ask(message="streamed"))[-1].type == "run_stop"
    assert (
        EchoAgent.start_execution(message="in the background").wait(timeout=30).response
        == "You said: in the background"
    )
    with pytest.raises(InvocationError, match="either positionally or as message="):
        EchoAgent.ask("one", message="two")
    with pytest.raises(InvocationError, match="needs a message"):
        EchoAgent.ask(context={"a": 1})


@pytest.mark.parametrize("value", ["yes", 1])
def test_include_agent_events_accepts_only_true_or_false(config, script, value):
    target = script([{"text": "ok"}, {"text": "ok"}])

    class PlainAgent(Agent):
        model = target

    with pytest.raises(InvocationError, match="true or false"):
        PlainAgent.ask("hi", include_agent_events=value)
    assert PlainAgent.ask("hi", include_agent_events=False).completed
    assert PlainAgent.ask("hi", include_agent_events=True).include_agent_events is True
    assert lg_core.list_runs()[0].status == "completed"


@pytest.mark.parametrize("options", [{"message": "bad \ud800 text"}, {"message": "ok", "context": {"note": "\udc80"}}])
def test_text_that_is_not_valid_unicode_fails_before_a_run_exists(config, script, options):
    target = script([{"text": "never used"}])

    class PlainAgent(Agent):
        model = target

    with pytest.raises(InvocationError, match="lone surrogate"):
        PlainAgent.ask(**options)
    assert lg_core.list_runs() == []


def _put_in_settings(value):
    invocation = Invocation("hi")
    invocation.settings["sent_at"] = value
    return invocation, re.escape("settings.sent_at is a datetime")


def _put_in_metadata(value):
    invocation = Invocation("hi")
    invocation.metadata["sent_at"] = value
    return invocation, re.escape("metadata.sent_at is a datetime")


def _put_in_a_context_list(value):
    invocation = Invocation("hi", context={"items": []})
    invocation.context["items"].append(value)
    return invocation, re.escape("context.items[0] is a datetime")


def test_a_history_message_s_metadata_cannot_be_changed_after_it_was_set():
    """Messages are frozen, their metadata too (the spec's frozen DataMap), so nothing unstorable gets in later."""
    prior = Message(role="user", content="earlier", metadata={"source": "web", "tags": ["a"]})

    with pytest.raises(TypeError):
        prior.metadata["received_at"] = datetime.now()  # type: ignore[index]
    assert prior.metadata["tags"] == ("a",)
    assert Invocation("hi", history=[prior]).history[0].metadata == {"source": "web", "tags": ["a"]}


@pytest.mark.parametrize("put", [_put_in_settings, _put_in_metadata, _put_in_a_context_list])
def test_a_value_put_into_a_field_after_it_was_set_is_an_invocation_error_naming_it_before_a_run_exists(
    config, script, put
):
    """The fields' inner mappings and lists are mutable; the storable check finds what went in later."""
    target = script([{"text": "never used"}])

    class PlainAgent(Agent):
        model = target

    invocation, where = put(datetime.now())
    with pytest.raises(InvocationError, match=f"the invocation cannot be stored: {where}"):
        invocation.check_storable()
    with pytest.raises(InvocationError, match=where):
        PlainAgent.ask(invocation)
    assert lg_core.list_runs() == []


def test_a_deadline_given_as_text_names_deadline_and_points_to_deadline_at():
    with pytest.raises(InvocationError, match="deadline is a number of seconds from now .* deadline_at"):
        Invocation("x", deadline="60")


def test_new_run_ids_are_unique_uuid7_that_sort_by_creation_time():
    """Store tables are keyed by run id first: ids that grow with time keep new rows together."""
    earlier = new_id()
    time.sleep(0.002)  # a later millisecond: ids within one millisecond are in random order
    ids = [new_id() for _ in range(1000)]

    assert len(set(ids)) == 1000
    assert all(earlier < later for later in ids)
    parsed = uuid.UUID(earlier)
    assert (parsed.version, parsed.variant, parsed.hex) == (7, uuid.RFC_4122, earlier)
    assert abs(int(earlier[:12], 16) / 1000 - time.time()) < 60  # the first 48 bits are Unix milliseconds


@pytest.mark.parametrize("name", ["workspace", "sandbox"])
def test_a_caller_owned_workspace_or_sandbox_is_refused_naming_the_setting(name):
    """Stored as an ordinary field, it would be ignored: the run's are built from the settings."""
    with pytest.raises(InvocationError, match=rf"{name}= names the spec's caller-owned .* the {name} setting"):
        Invocation("x", **{name: "/srv/project"})
    with pytest.raises(InvocationError, match=f"{name}="):
        Invocation("x")[name] = "/srv/project"
