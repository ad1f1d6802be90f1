"""RunContext: working state, cancellation and deadline for one step of work.

Tools read it as ``self.context``. ``state`` is checkpointed with the step
that changed it, so it survives a crash; like the spec says, parallel tools
sharing it must synchronize or be ``exclusive``. Each step has its own copy and
commits only the top-level keys it changed (engine/_checkpoint.py
``apply_state_changes``), so parallel tools writing different keys keep both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from lg_core.cancellation import CancellationToken, token_or_new
from lg_core.datamap import DataMap
from lg_core.errors import DeadlineExceededError
from lg_core.usage import Usage

# Usage is frozen, so every context can start from the same zero value (the
# engine builds a context per step; validating a fresh Usage each time was a
# measurable part of a step).
NO_USAGE = Usage()  # the shared zero: a context that recorded nothing still holds it


class RunContext:
    def __init__(
        self,
        state: DataMap | dict[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        deadline: datetime | None = None,
        metadata: dict[str, Any] | None = None,
        conversation_id: str | None = None,
        agent_operation_id: str | None = None,
        checkpoint: Callable[..., Any] | None = None,
        interjection_metadata: Mapping[str, Any] | None = None,
        interjection_ids: Sequence[str] = (),
    ) -> None:
        self.state = _checked_state(state)
        self.cancellation_token = token_or_new(cancellation_token)
        self.deadline = _checked_deadline(deadline)
        self.metadata = dict(metadata or {})
        self.conversation_id = conversation_id
        self.agent_operation_id = agent_operation_id
        self.interjection_metadata = None if interjection_metadata is None else dict(interjection_metadata)
        self.interjection_ids = tuple(interjection_ids)
        self._checkpoint = checkpoint
        self._lock = threading.Lock()
        self._usage = NO_USAGE
        self._structured: Any = None

    def check(self) -> None:
        """Raise CancelledError or DeadlineExceededError when work should stop."""
        self.cancellation_token.raise_if_cancelled()
        if self.deadline is not None and time.time() >= self.deadline.timestamp():
            raise DeadlineExceededError()

    check_ = check

    def checkpoint(self, messages: Sequence[Any]) -> None:
        """Send ``messages`` and the current state to the checkpoint callback, if one was given.

        Called as ``checkpoint(messages, state=...)`` (so ``Session.checkpoint`` fits);
        without a callback this does nothing. The engine checkpoints a run's
        conversation and state with every step itself, so its contexts have none.
        """
        if self._checkpoint is not None:
            self._checkpoint(messages, state=self.state.to_dict())

    def remaining_time(self, maximum: float | None = None) -> float | None:
        """Seconds until the deadline, capped at ``maximum``; ``maximum`` when there is none."""
        if self.deadline is None:
            return maximum
        remaining = max(0.0, self.deadline.timestamp() - time.time())
        return remaining if maximum is None else min(remaining, maximum)

    def record_usage(self, value: Usage | Mapping[str, int]) -> None:
        """Add ``value`` (a Usage, or a mapping of its counts) to the usage this run recorded."""
        if not isinstance(value, Usage):
            if not isinstance(value, Mapping):
                raise TypeError(
                    f"record_usage takes a Usage or a mapping like {{'input_tokens': 12}}, got {type(value).__name__}"
                )
            value = Usage(**value)  # an unknown count is a TypeError naming the known ones
        with self._lock:
            # Usage is frozen: the first value is kept as is (no new object; most steps record one).
            first = self._usage is NO_USAGE and isinstance(value, Usage)
            self._usage = value if first else self._usage + value

    @property
    def usage(self) -> Usage:
        with self._lock:
            return self._usage

    def submit_structured_result(self, result: Any) -> Any:
        with self._lock:
            self._structured = result
        return result

    @property
    def structured_result(self) -> Any:
        """The latest validated StructuredResult submitted to this context, or None.

        A property, as :attr:`usage` is (both are the spec's zero-argument readers):
        as a method, ``context.structured_result`` would be a bound method, truthy
        whether or not a result was submitted.
        """
        with self._lock:
            return self._structured


def _checked_state(state: Any) -> DataMap:
    """``state`` as the context's DataMap (itself when it is one); TypeError naming what was
    given when it is not a mapping (a string or list would otherwise fail deep in DataMap)."""
    if isinstance(state, DataMap):
        return state
    if state is None:
        return DataMap()
    if not isinstance(state, Mapping):
        raise TypeError(
            f"RunContext state must be a mapping such as {{'plan': 'draft'}} (or None), got {type(state).__name__}"
        )
    return DataMap(state)


def _checked_deadline(deadline: Any) -> datetime | None:
    """``deadline`` when it is a datetime or None (what check() and remaining_time() can use)."""
    if deadline is not None and not isinstance(deadline, datetime):
        raise TypeError(f"deadline must be a datetime (or None), got {type(deadline).__name__}")
    return deadline


__all__ = ["RunContext"]
