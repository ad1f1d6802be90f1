"""Runs sharing a session: starting the next pending run, finding stalled sessions, ending a run that
never started. The transaction helpers are lg_core.store.session_transactions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from lg_core.store._rows import insert_events_txn
from lg_core.store._store_part import StorePart
from lg_core.store.records import ActivatedRun, dumps, ended_step_status
from lg_core.store.session_transactions import activate_next_txn, actor_key, stalled_sessions_txn
from lg_core.store.transient_errors import retry_transient


class SessionRuns(StorePart):
    """RunStore's serialization of runs that share a session (id and actor)."""

    @retry_transient
    def activate_next_pending(self, session_id: str, actor_id: str | None) -> list[ActivatedRun]:
        """Start the session's oldest pending run if none of its runs is running.

        A run's finishing commit does this itself; call it for sessions whose
        last run ended some other way (see :meth:`stalled_sessions`). Safe to
        call at any time and from several processes: it activates nothing while
        a run of the session is running. Use ``Engine.activate_next_pending`` to
        also hand the activated steps to their executors.
        """
        with self.db.transaction() as tx:
            return activate_next_txn(tx, session_id, actor_id, time.time(), self.relay_grace)

    @retry_transient
    def stalled_sessions(self, limit: int = 100) -> list[tuple[str, str | None]]:
        """``(session_id, actor_id)`` of sessions with a pending run but no running one."""
        with self.db.reader() as tx:
            return stalled_sessions_txn(tx, limit)

    @retry_transient
    def session_runner(self, session_id: str, actor_id: str | None) -> tuple[str, str | None] | None:
        """``(run_id, holder)`` of the session's running run, if one runs (holder None: on workers)."""
        with self.db.reader() as tx:
            row = tx.fetchone("select_session_runner", {"session_id": session_id, "actor_key": actor_key(actor_id)})
        return None if row is None else (row[0], row[1])

    @retry_transient
    def end_pending_run(
        self,
        run_id: str,
        status: str,
        error: dict[str, Any] | None,
        usage: dict[str, Any],
        events: Sequence[tuple[str, dict[str, Any]]],
    ) -> int | None:
        """End a run that never started (e.g. cancelled while waiting for its session).

        Returns the first seq of ``events``, or None when the run is no longer pending.
        """
        now = time.time()
        with self.db.transaction() as tx:
            params = {
                "run_id": run_id,
                "status": status,
                "error": None if error is None else dumps(error),
                "usage": dumps(usage),
                "n": len(events),
                "now": now,
            }
            row = tx.fetchone("end_pending_run", params)
            if row is None:
                return None
            first = int(row[0]) - len(events) + 1
            insert_events_txn(tx, run_id, first, events, now)
            tx.execute("end_pending_steps", {"run_id": run_id, "status": ended_step_status(status), "now": now})
            unread = tx.execute("consume_unread_interjections", {"run_id": run_id, "now": now}).rowcount
            if unread:
                tx.execute("count_interjections", {"run_id": run_id, "delta": -unread})
        return first


__all__ = ["SessionRuns"]
