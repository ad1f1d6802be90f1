"""The frame format and the Python catalog, without a sandbox."""

from __future__ import annotations

import io
import struct

import pytest

from lg_core.code_mode import protocol
from lg_core.code_mode._program import RUNTIME_SOURCE
from lg_core.code_mode.catalog import Catalog, python_name
from lg_core.code_mode.protocol import MAX_FRAME_BYTES, ProtocolError
from lg_core.code_mode.session import code_mode_limits
from lg_core.errors import ConfigurationError
from lg_core.models.request import ToolSpecification


def spec(name, properties=None, required=(), description="Does a thing."):
    schema = {"type": "object", "properties": properties or {}, "required": list(required)}
    return ToolSpecification(name=name, description=description, input_schema=schema)


def test_a_frame_round_trips_through_a_buffer_and_a_stream():
    frame = protocol.dump({"type": "text", "text": "héllo"})
    buffer = bytearray(frame[:3])
    assert protocol.extract(buffer) is None  # a partial header waits for more bytes
    buffer += frame[3:] + frame
    assert protocol.extract(buffer) == {"type": "text", "text": "héllo"}
    assert protocol.extract(buffer) == {"type": "text", "text": "héllo"}
    assert buffer == bytearray()
    stream = io.BytesIO(frame)
    assert protocol.read(stream) == {"type": "text", "text": "héllo"}
    assert protocol.read(stream) is None  # clean end of file


def test_an_oversized_announced_length_is_refused_before_the_payload_arrives():
    with pytest.raises(ProtocolError, match="more than the limit"):
        protocol.extract(bytearray(struct.pack(">I", MAX_FRAME_BYTES + 1)))


@pytest.mark.parametrize(
    "payload, message",
    [(b"nope!", "not UTF-8 JSON"), (b"\xff\xfe", "not UTF-8 JSON"), (b"[1, 2]", "JSON object")],
)
def test_a_payload_that_is_not_a_json_object_is_a_protocol_error(payload, message):
    with pytest.raises(ProtocolError, match=message):
        protocol.extract(bytearray(struct.pack(">I", len(payload)) + payload))


def test_a_stream_ending_inside_a_frame_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="inside a frame"):
        protocol.read(io.BytesIO(protocol.dump({"a": 1})[:-1]))


def test_values_that_are_not_json_cannot_be_framed():
    with pytest.raises(ProtocolError, match="JSON-encodable"):
        protocol.dump({"value": object()})


def test_the_runtime_frames_with_the_same_header_and_limit():
    assert 'struct.Struct(">I")' in RUNTIME_SOURCE
    assert f"_MAX_FRAME_BYTES = {MAX_FRAME_BYTES // (1024 * 1024)} * 1024 * 1024" in RUNTIME_SOURCE


def test_the_catalog_renders_keyword_only_python_signatures_with_docstrings():
    catalog = Catalog(
        [
            spec("help_center_lookup", {"query": {"type": "string"}, "limit": {"type": "integer"}}, ["query"]),
            spec("inventory-count", {"mode": {"enum": ["a", "b"]}}),
        ]
    )
    rendered = catalog.rendered()
    assert "def help_center_lookup(*, query: str, limit: int | None = None) -> Any:" in rendered
    assert '"""Does a thing."""' in rendered
    assert "def inventory_count(*, mode: Literal['a', 'b'] | None = None) -> Any:" in rendered
    assert [entry["function"] for entry in catalog.to_list()] == ["help_center_lookup", "inventory_count"]


@pytest.mark.parametrize("name", ["exec", "wait", "stop", "call", "parallel"])
def test_names_that_would_shadow_code_mode_controls_are_refused(name):
    with pytest.raises(ConfigurationError, match="shadow"):
        Catalog([spec(name)])


def test_names_that_collide_once_normalized_are_refused():
    with pytest.raises(ConfigurationError, match="both become tools.a_b"):
        Catalog([spec("a-b"), spec("a.b")])


def test_python_names_avoid_keywords_leading_digits_and_underscores():
    assert python_name("import") == "import_"
    assert python_name("3d-render") == "tool_3d_render"
    assert python_name("_private") == "tool_private"


def test_unknown_or_invalid_limits_are_configuration_errors():
    with pytest.raises(ConfigurationError, match="unknown code-mode limit 'wall'"):
        code_mode_limits({"wall": 3})
    with pytest.raises(ConfigurationError, match="positive integer"):
        code_mode_limits({"wall_seconds": 0})
    assert code_mode_limits({"wall_seconds": 5})["wall_seconds"] == 5


def test_the_instructions_show_the_runtime_names_and_every_signature():
    from lg_core.code_mode import instructions

    text = instructions(Catalog([spec("help_center_lookup", {"query": {"type": "string"}}, ["query"])]), 60)
    for name in ("tools.call(name, arguments)", "tools.parallel(", "ALL_TOOLS", "text(value)", "finish(value)"):
        assert name in text
    assert "after 60 seconds" in text
    assert text.endswith('def help_center_lookup(*, query: str) -> Any:\n    """Does a thing."""')
    assert '{"code": "..."}' in text
