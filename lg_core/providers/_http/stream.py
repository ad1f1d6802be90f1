"""What every adapter's stream reader does the same way with the data of an SSE event.

Each adapter folds its own events into StreamEvents (Anthropic's ``EventReader``,
the ``ChunkReader`` of Chat Completions and of Gemini); all of them read an
event's data as one JSON object, quote a value they cannot use briefly in the
ProtocolError that reports it, and read token counts that a server may send as
null, as a negative number or not at all.
"""

from __future__ import annotations

import json
from typing import Any

from lg_core.errors import ProtocolError

QUOTED_CHARS = 120  # of a bad event or value, quoted in an error message


def parse_object(data: str, endpoint: str, noun: str) -> dict[str, Any]:
    """The JSON object an event's ``data`` holds; a ProtocolError naming the ``noun`` ("stream event",
    "stream chunk") and quoting the data when it is not JSON or not an object."""
    try:
        value = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ProtocolError(
            f"{endpoint} sent a {noun} that is not JSON ({exc.msg} at position {exc.pos}): {data[:QUOTED_CHARS]!r}"
        ) from None
    if not isinstance(value, dict):
        raise ProtocolError(f"{endpoint} sent a {noun} that is not a JSON object: {data[:QUOTED_CHARS]!r}")
    return value


def brief(value: Any) -> str:
    """``value`` as JSON, cut short, for an error message about it."""
    return json.dumps(value, default=str)[:QUOTED_CHARS]


def token_count(value: Any) -> int:
    """A token count from a usage object: a positive whole number, else 0 (absent, null, negative, a bool)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


__all__ = ["brief", "parse_object", "token_count"]
