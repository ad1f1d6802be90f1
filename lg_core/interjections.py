"""Waiting for the model's reply to an interjection (``Run.interject``, ``Execution.reply``).

An interjection is a user message added to a running run. The run's next model
turn reads it, and that turn's commit records which of its messages is the
model's reply. Waiting reads the store, never a process's memory, so it works
wherever the run executes: in this process, in another one, or on Celery
workers. The wait ends when the reply is committed; the run itself goes on
(tool calls the reply asked for run after it).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lg_core.cancellation import CancellationToken
from lg_core.content import ToolUse
from lg_core.errors import (
    AgentInterjectionError,
    CancelledError,
    DeadlineExceededError,
    InvocationError,
    RunNotFoundError,
)
from lg_core.messages import Message
from lg_core.store.outage_waits import aread_through_outage, read_through_outage
from lg_core.store.records import InterjectionAnswer

if TYPE_CHECKING:
    from lg_core.store import RunStore

FIRST_POLL_SECONDS = 0.01
LONGEST_POLL_SECONDS = 0.25


@dataclass(frozen=True, slots=True)
class InterjectionResult:
    """The model's immediate reply to one or more interjections.

    ``text`` is the reply's text; ``tool_calls`` says whether the reply asked for
    tools (``tool_uses`` lists them), which the run executes after this result.
    A model turn reads every interjection waiting for it, so ``numbers`` is each
    one this reply answers, and ``interjection_ids`` the ids given to those that
    had one. ``step`` is the model turn's step key.
    """

    text: str
    tool_uses: tuple[ToolUse, ...]
    numbers: tuple[int, ...]
    interjection_ids: tuple[str, ...]
    step: str
    message: Message

    @property
    def tool_calls(self) -> bool:
        """True when the reply asked for tool calls (the spec's ``tool_calls?``)."""
        return bool(self.tool_uses)


def result_of(run_id: str, number: int, answer: InterjectionAnswer) -> InterjectionResult | None:
    """The reply in ``answer``; None while no turn has read the interjection yet."""
    if answer.status == "pending":
        return None
    if answer.status != "answered" or answer.message is None or answer.step is None:
        raise AgentInterjectionError(
            f"run {run_id} ended before a model turn read interjection {number}; "
            "nothing answered it (retry the run to give it back to a new turn)"
        )
    message = Message.from_dict(answer.message)
    return InterjectionResult(
        text=message.text,
        # Only calls the run executes: a result submitted through the result tool is none.
        tool_uses=tuple(message.tool_uses) if answer.tool_calls else (),
        numbers=answer.numbers,
        interjection_ids=answer.interjection_ids,
        step=answer.step,
        message=message,
    )


class ReplyWait:
    """One caller's wait for the reply to interjection ``number`` of ``run_id``.

    :meth:`block` and :meth:`until_answered` (async) poll the store, from every
    10 ms up to every 250 ms. ``timeout`` (seconds) raises
    DeadlineExceededError and a cancelled ``cancellation_token`` raises
    CancelledError; neither stops the run. A run that ended without reading the
    interjection raises AgentInterjectionError.
    """

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        number: int,
        timeout: float | None = None,
        cancellation_token: CancellationToken | None = None,
    ) -> None:
        self.store, self.run_id, self.number = store, run_id, number
        self.timeout, self.cancellation_token = timeout, cancellation_token
        self._limit = None if timeout is None else time.monotonic() + timeout
        self._delay = FIRST_POLL_SECONDS

    def block(self) -> InterjectionResult:
        """Poll until answered; a database outage is waited out (lg_core.store.outage_waits) up to the timeout."""
        while True:
            answer = read_through_outage(self._read, self.run_id, self._limit, self._sleep)
            result = result_of(self.run_id, self.number, answer)
            if result is not None:
                return result
            self._sleep(self._next_pause())

    async def until_answered(self) -> InterjectionResult:
        """:meth:`block` for async code: store reads on a worker thread, never blocking the loop."""
        while True:
            answer = await aread_through_outage(self._read, self.run_id, self._limit)
            result = result_of(self.run_id, self.number, answer)
            if result is not None:
                return result
            if self.cancellation_token is not None and self.cancellation_token.cancelled:
                raise self._stopped()
            await asyncio.sleep(self._next_pause())

    def _read(self) -> Any:
        return self.store.interjection_answer(self.run_id, self.number)

    def _sleep(self, seconds: float) -> None:
        """Pause, or raise CancelledError as soon as the cancellation token is cancelled."""
        token = self.cancellation_token
        if token is None:
            time.sleep(seconds)
        elif token.wait(seconds):
            raise self._stopped()

    def _next_pause(self) -> float:
        pause, self._delay = self._delay, min(self._delay * 1.5, LONGEST_POLL_SECONDS)
        if self._limit is None:
            return pause
        remaining = self._limit - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceededError(
                f"no reply to interjection {self.number} of run {self.run_id} after {self.timeout} s; "
                "the run keeps going (wait again with Execution.reply)"
            )
        return min(pause, remaining)

    def _stopped(self) -> CancelledError:
        reason = self.cancellation_token.reason if self.cancellation_token is not None else None
        return CancelledError(
            f"stopped waiting for the reply to interjection {self.number} of run {self.run_id}: "
            f"{reason or 'the cancellation token was cancelled'}; the run keeps going"
        )


def wait_timeout(timeout: float | None, deadline: datetime | None) -> float | None:
    """Seconds to wait from a relative ``timeout`` or an absolute ``deadline`` (one of them, or neither)."""
    if deadline is not None:
        if timeout is not None:
            raise InvocationError("pass either timeout (seconds) or deadline (a datetime), not both")
        if not isinstance(deadline, datetime) or deadline.tzinfo is None:
            raise InvocationError(
                f"deadline must be a timezone-aware datetime, e.g. datetime.now(UTC) + timedelta(seconds=30) for the "
                f"spec's Time.now + 30 (a naive one names no instant), got {deadline!r}"
            )
        return max(0.0, deadline.timestamp() - time.time())
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise InvocationError(f"timeout must be a non-negative number of seconds or None, got {timeout!r}")
    return float(timeout)


MAX_INTERJECTION_NUMBER = 2**31 - 1  # lg_interjections.seq is a 32-bit integer


def reply_wait(
    store: Any, run_id: str, number: Any, timeout: float | None, deadline: datetime | None, cancellation_token: Any
) -> ReplyWait:
    """A checked wait for the reply to interjection ``number``: InvocationError for bad arguments."""
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise InvocationError(f"an interjection number is a positive int (what interject returned), got {number!r}")
    if number > MAX_INTERJECTION_NUMBER:  # beyond the store's column: no run has it
        raise RunNotFoundError(f"run {run_id!r} has no interjection number {number}")
    return ReplyWait(store, run_id, number, reply_seconds(timeout, deadline, cancellation_token), cancellation_token)


def reply_seconds(timeout: float | None, deadline: datetime | None, cancellation_token: Any) -> float | None:
    """Check how a reply wait may end (InvocationError for bad values); the seconds it may take."""
    if cancellation_token is not None and not isinstance(cancellation_token, CancellationToken):
        raise InvocationError(
            f"cancellation_token must be a CancellationToken, got {type(cancellation_token).__name__}"
        )
    return wait_timeout(timeout, deadline)


__all__ = [
    "MAX_INTERJECTION_NUMBER",
    "InterjectionResult",
    "ReplyWait",
    "reply_seconds",
    "reply_wait",
    "result_of",
    "wait_timeout",
]
