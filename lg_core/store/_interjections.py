"""Interjections: user messages queued for a run's next model turn, and whether a turn answered one."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from lg_core.errors import InvocationError, RunNotFoundError
from lg_core.store._rows import step_record
from lg_core.store._store_part import StorePart
from lg_core.store.records import (
    RUN_TERMINAL,
    STEP_OPEN,
    InterjectionAnswer,
    StepRecord,
    dumps,
    loads,
)
from lg_core.store.transient_errors import retry_transient

_MAX_REPLY_HOPS = 8  # reply_in links: one per repair, and a frame repairs once


class Interjections(StorePart):
    """RunStore's interjections: queue one (idempotent by id), list the pending ones, find a reply."""

    @retry_transient
    def add_interjection(
        self,
        run_id: str,
        message: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        interjection_id: str | None = None,
    ) -> int:
        """Queue a user message for the run's next model turn; returns its sequence number.

        ``interjection_id`` makes the call idempotent: the same id again (a web
        request retried after a lost response) returns the first call's number and
        adds nothing, even once the run has finished; the same id with another
        message raises InvocationError. The run row's lock serializes the check.
        """
        with self.db.transaction() as tx:
            flags = tx.fetchone("lock_run_flags", {"run_id": run_id})
            if flags is None:
                raise RunNotFoundError(f"no run with id {run_id!r}")
            if interjection_id is not None:
                earlier = tx.fetchone("find_interjection", {"run_id": run_id, "interjection_id": interjection_id})
                if earlier is not None:
                    return _same_interjection(run_id, interjection_id, earlier, message)
            if flags[0] not in ("running", "pending") or flags[1]:
                from lg_core.errors import AgentInterjectionError

                state = f"has finished ({flags[0]})" if flags[0] not in ("running", "pending") else "is being cancelled"
                raise AgentInterjectionError(f"run {run_id} {state}; it cannot accept an interjection")
            seq = int(tx.fetchone("next_interjection_seq", {"run_id": run_id})[0])
            tx.execute("count_interjections", {"run_id": run_id, "delta": 1})
            tx.execute(
                "insert_interjection",
                {
                    "run_id": run_id,
                    "seq": seq,
                    "message": dumps(message),
                    "metadata": dumps(metadata or {}),
                    "created_at": time.time(),
                    "interjection_id": interjection_id,
                },
            )
        return seq

    @retry_transient
    def pending_interjections(self, run_id: str) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
        with self.db.reader() as tx:
            rows = tx.fetchall("select_pending_interjections", {"run_id": run_id})
        return [(seq, loads(message), loads(metadata) or {}) for seq, message, metadata in rows]

    @retry_transient
    def interjection_answer(self, run_id: str, seq: int) -> InterjectionAnswer:
        """Has a model turn answered interjection ``seq``? Its reply, when one has.

        A model turn consumes interjections in its commit, which records its reply
        message's number in the step result (``reply_message``). A turn whose
        answer was rejected for repair (an invalid structured result) names the
        turn that answers instead (``reply_in``), and this follows it. An ending
        consumes the interjections it will never read and records neither.
        """
        with self.db.reader() as tx:
            row = tx.fetchone("select_interjection", {"run_id": run_id, "seq": seq})
            if row is None:
                raise RunNotFoundError(f"run {run_id!r} has no interjection number {seq}")
            consumed_at, reader_key, run_status = row
            if consumed_at is None:
                # A finished run never reads it (every ending marks its unread ones consumed,
                # so this only guards rows an older version left behind).
                return InterjectionAnswer("unanswered" if run_status in RUN_TERMINAL else "pending")
            step, key = None, reader_key
            for _hop in range(_MAX_REPLY_HOPS):
                found = None if key is None else tx.fetchone("select_step", {"run_id": run_id, "key": key})
                step = None if found is None else step_record(found)
                result = step.result if step is not None and isinstance(step.result, dict) else {}
                if step is None or "reply_in" not in result or step.status != "succeeded":
                    break
                key = result["reply_in"]
            if step is not None and step.status in STEP_OPEN:
                return InterjectionAnswer("unanswered" if run_status in RUN_TERMINAL else "pending")
            reply = result.get("reply_message") if step is not None and step.status == "succeeded" else None
            if reply is None:
                return InterjectionAnswer("unanswered", step=key)
            # A reply is only read from a step (above), so ``step`` is not None here.
            message = tx.fetchone("select_message", {"frame_id": cast(StepRecord, step).frame_id, "seq": reply})
            read = tx.fetchall("select_interjections_of_step", {"run_id": run_id, "step": reader_key})
        return InterjectionAnswer(
            "answered",
            step=key,
            message=None if message is None else loads(message[0]),
            numbers=tuple(int(number) for number, _id in read),
            interjection_ids=tuple(given for _number, given in read if given is not None),
            tool_calls=bool(result.get("tool_calls")),
        )


def _same_interjection(run_id: str, interjection_id: str, earlier: Sequence[Any], message: dict[str, Any]) -> int:
    """The earlier interjection's number, when it carried the same message."""
    seq, stored = earlier
    if loads(stored) != loads(dumps(message)):
        raise InvocationError(
            f"interjection id {interjection_id!r} of run {run_id} was used for another message; "
            "an interjection id names one message (use a new id for a new message)"
        )
    return int(seq)


__all__ = ["Interjections"]
