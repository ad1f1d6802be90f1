"""Event ids, the resume points of a run's events (for Server-Sent Events' ``Last-Event-ID``).

An id is ``"<seq>-<position>"``: ``seq`` is the highest durable event sequence number
the reader has yielded, ``position`` its place in the live stream (a bare ``"<seq>"``
means "after durable event ``seq``", position unknown), with a ``".<n>"`` suffix while
``n`` events published at once (``model_retry``) await their stored copy.
"""

from __future__ import annotations

import re

from lg_core.errors import InvocationError
from lg_core.store import RunRecord

# "<seq>-<position>[.<announced>]"; bounded, since int() of 5,000 digits raises.
# ASCII digits only: \d also matches other scripts' digits ("١" read as 1).
_EVENT_ID = re.compile(r"^(\d{1,18})(?:-(\d{1,20}(?:-\d{1,20})?)(?:\.(\d{1,4}))?)?$", re.ASCII)


def parse_event_id(value: str | None) -> tuple[int, str | None]:
    """``(seq, position)`` of an event id; position None when the id names only a seq."""
    seq, position, _announced = parse_resume_point(value)
    return seq, position


def parse_resume_point(value: str | None) -> tuple[int, str | None, int]:
    """``(seq, position, announced)`` of an event id.

    ``announced`` counts the events published at once (``model_retry``) that the
    reader had yielded from the live stream before their stored copy: a reader
    resuming from the id skips that many stored copies instead of repeating them
    (a client would take a repeated ``model_retry`` as a second retry and drop the
    text streamed since the first).
    """
    if value is None or value == "":
        return 0, "0", 0
    match = _EVENT_ID.fullmatch(str(value).strip())
    if match is None:
        raise InvocationError(
            f"event id {value!r} is not one this run produced: expected '<seq>-<position>' as given in "
            "event.id (or a bare durable sequence number)"
        )
    seq, position, announced = int(match.group(1)), match.group(2), int(match.group(3) or 0)
    if seq > 0 and position == "0":
        # An id given while the reader had no stream position (it read the store): no
        # real position is "0", so this id says where to resume in the log only.
        position = None
    return seq, position, announced


def check_event_id(value: str | None, record: RunRecord) -> tuple[int, str | None]:
    """:func:`parse_event_id`, also refusing an id ahead of the run's durable log."""
    seq, position = parse_event_id(value)
    if seq > record.event_seq:
        raise InvocationError(
            f"event id {value!r} is ahead of run {record.id}, which has {record.event_seq} durable events; "
            "pass an id this run's events carried"
        )
    return seq, position


__all__ = ["check_event_id", "parse_event_id", "parse_resume_point"]
