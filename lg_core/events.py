"""StreamEvent: the one language of live agent output.

Event names are the spec's. Provider events describe one model response;
agent events bracket an invocation and its tool executions; run events end a
top-level run (exactly one terminal event per run).

Durability: deltas and "start" markers are live-only; every other
event is written to the run store's event log in the commit of the step that
produced it and is published, with its sequence number, only after that
commit. So a consumer never sees a durable event that a crash could take back,
and live order stays natural: a step's live events (start, deltas) come first,
its durable events (stop, usage, results) after. ``model_retry`` is published at
once (consumers must drop superseded deltas before new ones arrive) and also
stored.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

EventType = Literal[
    # provider events
    "message_start",
    "text_delta",
    "reasoning_delta",
    "tool_call_start",
    "tool_call_delta",
    "tool_call_stop",
    "usage",
    "model_retry",
    "message_stop",
    # agent events
    "invocation_start",
    "invocation_stop",
    "tool_execution_start",
    "tool_execution_stop",
    "tool_outcome_unknown",
    "structured_result_repair",
    "interjection",
    "agent_stream",
    # assembly coordination events
    "handoff",  # a Swarm member handed the request to another: source, target, message excerpt
    # replay bookkeeping
    "run_resumed",
    "run_retried",
    "run_forked",
    # terminal events
    "run_stop",
    "run_error",
    "run_partial",
    "run_cancel",
]
EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))
TERMINAL_EVENTS: dict[str, str] = {
    "completed": "run_stop",
    "failed": "run_error",
    "partial": "run_partial",
    "cancelled": "run_cancel",
}
LIVE_ONLY_EVENTS: frozenset[str] = frozenset(
    {"message_start", "text_delta", "reasoning_delta", "tool_call_start", "tool_call_delta", "tool_execution_start"}
)
PUBLISHED_AT_ONCE: frozenset[str] = frozenset({"model_retry"})


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One immutable event: a ``type`` from :data:`EventType` and a read-only ``data``."""

    type: str
    data: MappingProxyType[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    seq: int | None = None  # position in the durable log, once committed
    id: str | None = None  # resumable id given by Execution.events()
    # A durable event's data as stored (encoded, with what must not leave the process,
    # e.g. an error's message under capture_diagnostics = False, already left out):
    # what sinks publish to other processes, so they see what the store holds.
    stored: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def build(cls, type: str, /, **data: Any) -> StreamEvent:
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown stream event type {type!r}")
        return cls(type, MappingProxyType(data))

    def with_stored(self, stored: Mapping[str, Any]) -> StreamEvent:
        return StreamEvent(self.type, self.data, self.seq, self.id, stored)

    @property
    def terminal(self) -> bool:
        return self.type in _TERMINAL_TYPES

    @property
    def durable(self) -> bool:
        return self.type not in LIVE_ONLY_EVENTS

    def with_seq(self, seq: int) -> StreamEvent:
        return StreamEvent(self.type, self.data, seq, None, self.stored)

    def __repr__(self) -> str:
        return f"StreamEvent({self.type!r}, {dict(self.data)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle and deep-copy through plain dicts: a mapping proxy (``data``, maybe ``stored``)
        cannot be pickled, and events cross processes (multiprocessing queues) and get copied
        before buffering. The copy's ``data`` is read-only again (``_rebuilt_event``)."""
        stored = None if self.stored is None else dict(self.stored)
        return (_rebuilt_event, (self.type, dict(self.data), self.seq, self.id, stored))


def _rebuilt_event(
    type: str, data: dict[str, Any], seq: int | None, id: str | None, stored: dict[str, Any] | None
) -> StreamEvent:
    return StreamEvent(type, MappingProxyType(data), seq, id, stored)


_TERMINAL_TYPES = frozenset(TERMINAL_EVENTS.values())


ASYNC_CONSUMER = (
    "on_event is an async function; it is called on the thread executing the run, where its coroutine "
    "would never run and every event would be lost: pass a plain function, or consume the events with "
    "`async for event in Agent.stream_ask_async(...)` (or `execution.events()`)"
)


def checked_consumer(on_event: Any, error: type[Exception] = TypeError) -> Any:
    """``on_event`` when it can take each event: ``error`` (the entry point's class) for a value
    that is not callable or is async, before the run it would consume exists or changes."""
    if on_event is not None and not callable(on_event):
        raise error(f"on_event must be callable with each StreamEvent, got {type(on_event).__name__}")
    if on_event is not None and is_async_consumer(on_event):
        raise error(ASYNC_CONSUMER)
    return on_event


def is_async_consumer(on_event: Any) -> bool:
    """Is ``on_event`` an ``async def`` (a function, or an object whose ``__call__`` is one)?"""
    call = inspect.getattr_static(type(on_event), "__call__", None)
    return inspect.iscoroutinefunction(on_event) or inspect.iscoroutinefunction(call)


__all__ = [
    "ASYNC_CONSUMER",
    "EVENT_TYPES",
    "EventType",
    "StreamEvent",
    "TERMINAL_EVENTS",
    "checked_consumer",
    "is_async_consumer",
]
