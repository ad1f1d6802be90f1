"""Content blocks and Message: the serialized shapes the run store keeps."""

from __future__ import annotations

import base64
import json

import pytest
from pydantic import ValidationError

from lg_core import Document, Image, Message, Reasoning, Text, ToolResult, ToolUse
from lg_core.content import from_dict, normalize, serialize, well_formed_text
from lg_core.messages import FORMAT_VERSION

PNG = b"\x89PNG\r\n\x1a\n\x00\x01\xff binary"
PDF = b"%PDF-1.7\n\x00\xfe\xff"
OPAQUE = b"\x00\x01\x02 redacted \xff"

BLOCKS = [
    pytest.param(Text(text="Refunds take 30 days."), id="text"),
    pytest.param(Image(data=PNG, media_type="image/png", name="chart.png"), id="image"),
    pytest.param(Image(data=PNG, media_type="image/jpeg"), id="image-unnamed"),
    pytest.param(Document(data=PDF, media_type="application/pdf", name="policy.pdf"), id="document"),
    pytest.param(
        ToolUse(id="call_1", name="lookup", input={"topic": "refunds", "n": [1, {"x": None}]}),
        id="tool-use",
    ),
    pytest.param(
        ToolUse(
            id="call_9", name="lookup", input={"n": "NaN"}, input_error="input.n is NaN, which is not a JSON number"
        ),
        id="tool-use-invalid-input",
    ),
    pytest.param(
        ToolResult(
            tool_use_id="call_1",
            status="success",
            content=(
                Text(text="Found it."),
                Image(data=PNG, media_type="image/png"),
                Document(data=PDF, media_type="application/pdf", name="p.pdf"),
            ),
        ),
        id="tool-result-nested",
    ),
    pytest.param(
        ToolResult(tool_use_id="call_2", status="error", content=(Text(text="boom"),)),
        id="tool-result-error",
    ),
    pytest.param(Reasoning(text="Think first.", signature="sig-123"), id="reasoning"),
    pytest.param(Reasoning(redacted_content=OPAQUE), id="reasoning-redacted"),
    pytest.param(Reasoning(text="r", details=({"type": "summary", "n": 1},)), id="reasoning-details"),
]


@pytest.mark.parametrize("block", BLOCKS)
def test_every_block_kind_round_trips_through_json(block):
    data = serialize(block)
    wire = json.loads(json.dumps(data))  # proves it is JSON-safe
    assert wire["kind"] == block.kind
    assert from_dict(wire) == block


@pytest.mark.parametrize(
    ("block", "field", "raw"),
    [
        (Image(data=PNG, media_type="image/png"), "data", PNG),
        (Document(data=PDF, media_type="application/pdf", name="p.pdf"), "data", PDF),
        (Reasoning(redacted_content=OPAQUE), "redacted_content", OPAQUE),
    ],
)
def test_binary_fields_serialize_as_strict_base64(block, field, raw):
    data = serialize(block)
    assert isinstance(data[field], str)
    assert base64.b64decode(data[field], validate=True) == raw
    assert data[field] == base64.b64encode(raw).decode("ascii")


def test_tool_result_nested_content_is_serialized_block_by_block():
    block = ToolResult(
        tool_use_id="c",
        status="success",
        content=(Text(text="a"), Image(data=PNG, media_type="image/png")),
    )
    data = serialize(block)
    assert data["content"][0] == {"kind": "text", "text": "a"}
    assert data["content"][1]["kind"] == "image"
    assert base64.b64decode(data["content"][1]["data"]) == PNG


def test_tool_result_accepts_a_plain_string_as_text_content():
    block = ToolResult(tool_use_id="c", status="success", content="done")
    assert block.content == (Text(text="done"),)
    assert block.text == "done"


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(Text(text="ok"), id="one-block"),
        pytest.param(["ok"], id="list-of-strings"),
        pytest.param({"kind": "text", "text": "ok"}, id="one-serialized-block"),
        pytest.param([Text(text="ok")], id="list-of-blocks"),
    ],
)
def test_tool_result_accepts_content_in_the_forms_message_does(content):
    result = ToolResult(tool_use_id="c1", content=content, status="success")
    assert result.content == (Text(text="ok"),)
    assert Message(role="user", content=content).content == result.content


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (5, "ToolResult content must be a string, a Text, Image or Document block, or a list of them, got int"),
        (b"raw", "got bytes"),
        ([ToolUse(id="c", name="t", input={})], "only Text, Image and Document blocks, got ToolUse"),
    ],
)
def test_tool_result_content_of_another_kind_is_one_type_error_saying_what_it_takes(content, match):
    with pytest.raises(TypeError, match=match):
        ToolResult(tool_use_id="c1", content=content, status="success")


def test_redacted_reasoning_round_trips_without_text_or_signature():
    data = serialize(Reasoning(redacted_content=OPAQUE))
    assert "signature" not in data
    rebuilt = from_dict(data)
    assert rebuilt.redacted_content == OPAQUE
    assert rebuilt.text == ""


def test_redacted_reasoning_excludes_text_and_signature():
    with pytest.raises(ValidationError, match="redacted_content excludes text and signature"):
        Reasoning(text="visible", redacted_content=OPAQUE)
    with pytest.raises(ValidationError, match="redacted_content excludes"):
        Reasoning(signature="s", redacted_content=OPAQUE)


def test_blocks_are_frozen():
    block = Text(text="a")
    with pytest.raises(ValidationError):
        block.text = "b"


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"kind": "video", "url": "x"}, "video"),
        (
            {"kind": "image", "data": "@@not base64@@", "media_type": "image/png"},
            "image.data is not valid base64",
        ),
        (
            {"kind": "reasoning", "redacted_content": "%%%"},
            "reasoning.redacted_content is not valid base64",
        ),
        ({"kind": "text"}, "text"),
        ({"kind": "text", "text": "a", "extra": 1}, "extra"),
        ({"kind": "tool_use", "id": "", "name": "x", "input": {}}, "id"),
        ({"kind": "tool_result", "tool_use_id": "c", "status": "maybe", "content": []}, "status"),
    ],
)
def test_from_dict_rejects_bad_serialized_blocks(data, match):
    with pytest.raises(ValueError, match=match):  # pydantic's ValidationError is a ValueError
        from_dict(data)


def test_image_rejects_non_image_media_type():
    with pytest.raises(ValidationError, match=r"image/\* type, got 'text/plain'"):
        Image(data=b"x", media_type="text/plain")


@pytest.mark.parametrize("data", ["aGVsbG8=", 5, None])
def test_binary_blocks_require_bytes(data):
    with pytest.raises(TypeError, match=f"Image.data must be bytes, got {type(data).__name__}"):
        Image(data=data, media_type="image/png")
    with pytest.raises(TypeError, match="Document.data must be bytes"):
        Document(data=data, media_type="text/plain", name="n")


def test_binary_blocks_accept_bytearray_and_memoryview():
    assert Image(data=bytearray(b"ab"), media_type="image/png").data == b"ab"
    assert Document(data=memoryview(b"cd"), media_type="text/plain", name="n").data == b"cd"


def test_normalize_accepts_blocks_strings_and_dicts():
    block = Text(text="x")
    assert normalize(block) is block
    assert normalize("hi") == Text(text="hi")
    assert normalize({"kind": "text", "text": "d"}) == Text(text="d")


@pytest.mark.parametrize("bad", [5, b"bytes", object(), ["list"]])
def test_normalize_rejects_other_types_naming_them(bad):
    with pytest.raises(TypeError, match=type(bad).__name__):
        normalize(bad)


# -- Message ---------------------------------------------------------------------------


def _rich_message() -> Message:
    return Message(
        role="assistant",
        content=[
            Reasoning(text="private thoughts"),
            Text(text="Hello "),
            ToolUse(id="c1", name="lookup", input={"q": "x"}),
            Text(text="world"),
            Reasoning(redacted_content=OPAQUE),
        ],
        metadata={"model": "scripted:x", "n": [1, 2]},
    )


def test_message_round_trips_with_format_version():
    message = _rich_message()
    data = message.to_dict()
    assert data["v"] == FORMAT_VERSION == 1
    assert data["role"] == "assistant"
    assert data["metadata"] == {"model": "scripted:x", "n": [1, 2]}
    wire = json.loads(json.dumps(data))
    assert Message.from_dict(wire) == message


@pytest.mark.parametrize("role", ["system", "user", "assistant", "tool"])
def test_message_round_trips_every_role(role):
    message = Message(role, "text")
    assert Message.from_dict(message.to_dict()) == message


def test_message_to_dict_omits_empty_metadata():
    assert "metadata" not in Message("user", "hi").to_dict()


def test_message_with_tool_results_round_trips():
    message = Message(
        "tool",
        [
            ToolResult(
                tool_use_id="c1",
                status="success",
                content=(Text(text="ok"), Image(data=PNG, media_type="image/png")),
            )
        ],
    )
    rebuilt = Message.from_dict(json.loads(json.dumps(message.to_dict())))
    assert rebuilt == message
    assert rebuilt.tool_results[0].content[1].data == PNG


def test_message_from_dict_without_version_uses_current_format():
    message = Message.from_dict({"role": "user", "content": [{"kind": "text", "text": "hi"}]})
    assert message.text == "hi"


def test_message_from_dict_rejects_unknown_version():
    with pytest.raises(ValueError, match="unsupported message format version 2"):
        Message.from_dict({"v": 2, "role": "user", "content": []})


@pytest.mark.parametrize(
    ("data", "missing"),
    [({"v": 1, "content": []}, "role"), ({"v": 1, "role": "user"}, "content")],
)
def test_message_from_dict_names_missing_keys(data, missing):
    with pytest.raises(ValueError, match=f"needs.*{missing}"):
        Message.from_dict(data)


def test_message_text_excludes_reasoning_and_tool_content():
    message = _rich_message()
    assert message.text == "Hello world"
    tool_message = Message("tool", [ToolResult(tool_use_id="c", status="success", content="result text")])
    assert tool_message.text == ""


def test_message_tool_uses_and_results():
    message = _rich_message()
    assert [u.id for u in message.tool_uses] == ["c1"]
    assert message.tool_results == []


def test_without_reasoning_drops_only_reasoning_blocks():
    message = _rich_message()
    stripped = message.without_reasoning()
    assert [b.kind for b in stripped.content] == ["text", "tool_use", "text"]
    assert stripped.role == message.role
    assert stripped.metadata == message.metadata
    assert len(message.content) == 5  # the original is untouched


def test_without_reasoning_returns_self_when_nothing_to_drop():
    message = Message("user", "plain")
    assert message.without_reasoning() is message


def test_message_content_normalization_forms():
    assert Message("user", "hi").content == (Text(text="hi"),)
    assert Message("user", Text(text="hi")).content == (Text(text="hi"),)
    assert Message("user", {"kind": "text", "text": "hi"}).content == (Text(text="hi"),)
    assert Message("user", ["a", Text(text="b")]).text == "ab"
    assert Message(role="user", content="kw").text == "kw"


def test_message_is_frozen():
    message = Message("user", "hi")
    with pytest.raises(ValidationError):
        message.role = "assistant"


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (5, "got int"),
        (b"raw bytes", r"got bytes \(wrap binary data in Image"),
        ([object()], "got object"),
        ([5], "got int"),
    ],
)
def test_message_rejects_bad_content_types(content, match):
    with pytest.raises(TypeError, match=match):
        Message("user", content)


def test_message_rejects_unknown_role():
    with pytest.raises(ValidationError, match="role"):
        Message("robot", "hi")


def test_message_rejects_non_json_metadata():
    with pytest.raises(TypeError, match=r"metadata\.when is a object"):
        Message("user", "hi", metadata={"when": object()})


def test_message_coerce():
    message = Message("user", "x")
    assert Message.coerce(message) is message
    assert Message.coerce("hi") == Message("user", "hi")
    assert Message.coerce("hi", role="assistant").role == "assistant"
    assert Message.coerce({"role": "assistant", "content": "a"}) == Message("assistant", "a")
    assert Message.coerce(message.to_dict()) == message


def test_well_formed_text_joins_surrogate_pairs_and_replaces_lone_surrogates():
    assert well_formed_text("plain ascii") == "plain ascii"
    assert well_formed_text("café ✓") == "café ✓"
    assert well_formed_text("caf\udce9.txt") == "caf\ufffd.txt"  # os.fsdecode(b"caf\xe9.txt")
    assert well_formed_text("a\ud83d\ude00b") == "a\U0001f600b"  # an emoji's halves from two JSON escapes
    assert well_formed_text("x\ud83dy\ude00") == "x\ufffdy\ufffd"
