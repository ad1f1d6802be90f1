"""What an ``interject_subagent`` call answers: the child's next model response after the interjection.

The spec's manager delivers an interjection to a child's running turn and waits for
the child's next model response, reporting in ``response_disposition`` whether that
response also started tool calls (the child goes on with them: an interjection does
not stop it). The response is read from the store (``interjection_answer``: the
model turn that read the interjection records its reply), so it is found wherever
the child runs. A local call blocks its thread, polling, until the response or the
long poll's deadline; a call on a worker reads once and otherwise parks (see
lg_core.subagents._control_step). When the deadline passes first the call answers
``still_working``: the message was delivered and the child has not answered it yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from lg_core.errors import ToolError
from lg_core.messages import Message
from lg_core.store.records import InterjectionAnswer
from lg_core.subagents.control_inputs import SEND
from lg_core.subagents.ledger import Ledger

LOCAL_POLL_SECONDS = 0.05  # how often a local wait or interject call reads the store for progress
# A parked interject call on a worker is executed again this often (by the scheduler's wake_at
# timer) to look for the response, which may come without the child's turn ending.
PARKED_RECHECK_SECONDS = 2.0


def block_for_reply(
    store: Any, child_run_id: str, number: int, deadline: float, check_interrupt: Callable[[], None]
) -> InterjectionAnswer:
    """Poll until the child's model answered interjection ``number`` (or its turn ended) or ``deadline`` passes."""
    while True:
        answer: InterjectionAnswer = store.interjection_answer(child_run_id, number)
        if answer.status != "pending" or time.time() >= deadline:
            return answer
        check_interrupt()
        time.sleep(LOCAL_POLL_SECONDS)


def reply_view(subagent_id: str, number: int, answer: InterjectionAnswer, ledger: Ledger) -> dict[str, Any]:
    """The call's result for ``answer`` (an answered or still pending interjection); ToolError when its
    turn ended without a model turn reading it."""
    if answer.status == "pending":
        return {"subagent_id": subagent_id, "status": "still_working", "interjection": number}
    if answer.status != "answered" or answer.message is None:
        raise ToolError(
            f"{subagent_id}'s turn ended before its model read the interjection; queue a follow-up with {SEND}"
        )
    return {
        "subagent_id": subagent_id,
        "status": "answered",
        "interjection": number,
        "response": ledger.bounded(Message.from_dict(answer.message).text),
        # The response also asked for tools: the child goes on with them after this answer.
        "response_disposition": "tool_calls" if answer.tool_calls else "final",
    }


__all__ = ["LOCAL_POLL_SECONDS", "PARKED_RECHECK_SECONDS", "block_for_reply", "reply_view"]
