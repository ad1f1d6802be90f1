"""Length-prefixed JSON frames: how a code-mode program and its parent talk.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON.
The length is checked against MAX_FRAME_BYTES before anything is allocated or
parsed, so a program cannot make its parent buffer or decode an unbounded
message; a frame that is too large, not JSON, or not an object is a
ProtocolError naming what was wrong. The in-sandbox runtime carries its own
copy of this framing (it runs with the standard library only) and the tests
hold the two to the same bytes.
"""

from __future__ import annotations

import json
import struct
from typing import IO, Any

from lg_core.errors import Error

MAX_FRAME_BYTES = 4 * 1024 * 1024
HEADER = struct.Struct(">I")


class ProtocolError(Error):
    """A malformed or oversized code-mode frame."""


def dump(value: Any) -> bytes:
    """One encoded frame for ``value`` (a JSON object)."""
    if not isinstance(value, dict):
        raise ProtocolError(f"a frame carries a JSON object, got {type(value).__name__}")
    try:
        payload = json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise ProtocolError(f"the frame is not JSON-encodable: {error}") from None
    if len(payload) > MAX_FRAME_BYTES:
        raise ProtocolError(f"a frame of {len(payload)} bytes exceeds the limit of {MAX_FRAME_BYTES} bytes")
    return HEADER.pack(len(payload)) + payload


def extract(buffer: bytearray) -> dict[str, Any] | None:
    """Remove and return one complete frame from ``buffer``; None while more bytes are needed."""
    if len(buffer) < HEADER.size:
        return None
    (length,) = HEADER.unpack_from(buffer)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"a frame announces {length} bytes, more than the limit of {MAX_FRAME_BYTES} bytes")
    if len(buffer) < HEADER.size + length:
        return None
    payload = bytes(buffer[HEADER.size : HEADER.size + length])
    del buffer[: HEADER.size + length]
    return _decoded(payload)


def read(stream: IO[bytes]) -> dict[str, Any] | None:
    """Read one frame from ``stream``; None at a clean end of file, ProtocolError inside a frame."""
    header = stream.read(HEADER.size)
    if not header:
        return None
    if len(header) < HEADER.size:
        raise ProtocolError("the stream ended inside a frame header")
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"a frame announces {length} bytes, more than the limit of {MAX_FRAME_BYTES} bytes")
    payload = stream.read(length)
    if len(payload) < length:
        raise ProtocolError("the stream ended inside a frame")
    return _decoded(payload)


def write(stream: IO[bytes], value: Any) -> None:
    """Encode ``value`` and write it to ``stream`` as one frame."""
    stream.write(dump(value))
    stream.flush()


def _decoded(payload: bytes) -> dict[str, Any]:
    try:
        value = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ProtocolError(f"a frame is not UTF-8 JSON: {error}") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"a frame must hold a JSON object, got {type(value).__name__}")
    return value


__all__ = ["HEADER", "MAX_FRAME_BYTES", "ProtocolError", "dump", "extract", "read", "write"]
