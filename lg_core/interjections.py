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
from typing import TYPE_CHECKING

from lg_core.cancellation import CancellationToken
from lg_core.content import ToolUse
from lg_core.errors import AgentInterjectionError, CancelledError, DeadlineExceededError
from lg_core.messages import Message
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
        tool_uses=tuple(message.tool_uses),
        numbers=answer.numbers,
        interjection_ids=answer.interjection_ids,
        step=answer.step,
        message=message,
    )


def wait_for_reply(
    store: RunStore,
    run_id: str,
    number: int,
    timeout: float | None = None,
    cancellation_token: CancellationToken | None = None,
) -> InterjectionResult:
    """Block until a model turn has answered interjection ``number`` of ``run_id``.

    Raises DeadlineExceededError after ``timeout`` seconds, CancelledError when
    ``cancellation_token`` is cancelled (neither stops the run), and
    AgentInterjectionError when the run ended without reading it.
    """
    limit = None if timeout is None else time.monotonic() + timeout
    delay = FIRST_POLL_SECONDS
    while True:
        result = result_of(run_id, number, store.interjection_answer(run_id, number))
        if result is not None:
            return result
        pause = _next_pause(run_id, number, timeout, limit, delay)
        if cancellation_token is not None:
            if cancellation_token.wait(pause):
                raise _stopped(run_id, number, cancellation_token)
        else:
            time.sleep(pause)
        delay = min(delay * 1.5, LONGEST_POLL_SECONDS)


async def wait_for_reply_async(
    store: RunStore,
    run_id: str,
    number: int,
    timeout: float | None = None,
    cancellation_token: CancellationToken | None = None,
) -> InterjectionResult:
    """:func:`wait_for_reply` for async code: store reads on a worker thread, never blocking the loop."""
    limit = None if timeout is None else time.monotonic() + timeout
    delay = FIRST_POLL_SECONDS
    while True:
        answer = await asyncio.to_thread(store.interjection_answer, run_id, number)
        result = result_of(run_id, number, answer)
        if result is not None:
            return result
        if cancellation_token is not None and cancellation_token.cancelled:
            raise _stopped(run_id, number, cancellation_token)
        await asyncio.sleep(_next_pause(run_id, number, timeout, limit, delay))
        delay = min(delay * 1.5, LONGEST_POLL_SECONDS)


def _next_pause(run_id: str, number: int, timeout: float | None, limit: float | None, delay: float) -> float:
    if limit is None:
        return delay
    remaining = limit - time.monotonic()
    if remaining <= 0:
        raise DeadlineExceededError(
            f"no reply to interjection {number} of run {run_id} after {timeout} s; "
            "the run keeps going (wait again with Execution.reply)"
        )
    return min(delay, remaining)


def _stopped(run_id: str, number: int, token: CancellationToken) -> CancelledError:
    reason = token.reason or "the caller's cancellation token was cancelled"
    return CancelledError(f"stopped waiting for the reply to interjection {number} of run {run_id}: {reason}; the run keeps going")


__all__ = ["InterjectionResult", "result_of", "wait_for_reply", "wait_for_reply_async"]
