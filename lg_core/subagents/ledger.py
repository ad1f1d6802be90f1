"""The manager's ledger: every child identity of one parent run, its queued turns and where each stands.

The ledger is plain data, saved with the parent's checkpoint in the same commit
as the tool call that changed it, so a parent resumed on another worker knows
exactly which children exist, which turns are queued, running or done, and what
each answered. Every change is a method returning nothing and raising
``ToolError`` (whose message the parent's model reads) when a bound is
reached; the run goes on. It stays bounded: at most ``max_identities``
identities, ``max_queued_turns_per_identity`` queued turns each, messages of at
most ``max_message_chars`` and answers cut to ``max_response_chars``.

Turn order is first in, first out per identity, and across identities in the
order their turns were queued, so no child starves another; at most
``max_concurrent`` turns run at once, the rest wait in the ledger. A turn that
failed or was cancelled leaves its identity usable and its answer unrecorded:
only completed turns become a conversation's history.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

from lg_core.errors import ToolError
from lg_core.subagents.agent_path import ROOT, join
from lg_core.subagents.limits import ManagerLimits

TurnStatus = Literal["queued", "running"]
Outcome = Literal["completed", "failed", "cancelled"]
CURSOR_PREFIX = "after-"
TRUNCATION_NOTE = "\n[response truncated to {limit} characters]"


@dataclass(slots=True)
class Turn:
    """One queued or running turn: the message it starts with and its number among the identity's turns."""

    number: int
    message: str
    status: TurnStatus = "queued"
    queued_seq: int = 0


@dataclass(slots=True)
class Identity:
    """One child conversation: its path (the model's ``subagent_id``), kind and turns."""

    subagent_id: str
    kind: str
    conversation_id: str
    created_seq: int
    turns: list[Turn] = field(default_factory=list)  # queued and running, oldest first
    completed_turns: int = 0
    last_outcome: Outcome | None = None
    last_response: str | None = None
    last_error: str | None = None
    unseen: bool = False  # a turn ended since the parent last looked (wait or list)
    # The child run of the last completed turn: its conversation is where the next turn continues.
    history_run: str | None = None
    created_at: float = 0.0  # orders persisted identities across a session's runs
    # Restored from the parent session's registry and not yet sent a turn in this run: listed, its
    # transcript not loaded, and not counted against max_identities.
    dormant: bool = False

    @property
    def working(self) -> bool:
        return bool(self.turns)

    @property
    def status(self) -> str:
        """What the model is told: ``working`` while a turn is queued or running, else how the last one ended."""
        return "working" if self.turns else (self.last_outcome or "idle")


class Ledger:
    """The identities of one parent run and the bounds they are held to."""

    def __init__(self, limits: ManagerLimits, parent_path: str = ROOT) -> None:
        self.limits = limits
        self.parent_path = parent_path
        self.identities: dict[str, Identity] = {}
        self.turns_queued_total = 0
        self.seq = 0  # orders creations and queued turns
        # Parent steps parked until a turn ends or their deadline passes: step key -> (ids or None, deadline).
        self.waiters: dict[str, tuple[list[str] | None, float]] = {}
        # A parked interject call's step key -> the child run it interjected and the interjection's number.
        self.interjections: dict[str, tuple[str, int]] = {}

    # -- what the parent's model asks for ---------------------------------------------

    def spawn(self, kind: str, task_name: str, task: str, conversation_id: str, created_at: float = 0.0) -> Identity:
        """A new identity ``<parent>/<task_name>`` with ``task`` as its first queued turn."""
        subagent_id = join(self.parent_path, task_name)
        if subagent_id in self.identities:
            raise ToolError(
                f"a subagent named {task_name!r} already exists ({subagent_id}); send it a follow-up with "
                "send_subagent_message or choose another task_name"
            )
        if self._active_count() >= self.limits.max_identities:
            raise ToolError(
                f"this run already has {self.limits.max_identities} subagents, the most it may create; "
                "send follow-ups to existing ones instead"
            )
        self._check_turn_budget()
        identity = Identity(subagent_id, kind, conversation_id, self._next_seq(), created_at=created_at)
        self.identities[subagent_id] = identity
        self._queue(identity, task)
        return identity

    def send(self, subagent_id: str, message: str) -> Turn:
        """Queue a follow-up turn behind the identity's other turns (never interrupting a running one)."""
        identity = self.identity(subagent_id)
        if sum(turn.status == "queued" for turn in identity.turns) >= self.limits.max_queued_turns_per_identity:
            raise ToolError(
                f"{subagent_id} already has {self.limits.max_queued_turns_per_identity} follow-ups queued; "
                "wait for it with wait_for_subagents before sending more"
            )
        self._check_turn_budget()
        if identity.dormant and self._active_count() >= self.limits.max_identities:
            raise ToolError(
                f"this run already works with {self.limits.max_identities} subagents, the most it may; "
                "send follow-ups to those instead"
            )
        identity.dormant = False
        return self._queue(identity, message)

    def _active_count(self) -> int:
        """The identities this run works with: the dormant ones restored from its session do not count."""
        return sum(not identity.dormant for identity in self.identities.values())

    def restore(self, entries: list[dict[str, Any]]) -> None:
        """Add the parent session's persisted identities (registry entries, newest first) as dormant ones.

        Oldest first, so their creation numbers keep the newest-first listing; an
        identity this run already holds is left as it is.
        """
        for entry in reversed(entries):
            identity = _identity_from(entry)
            if identity.subagent_id in self.identities:
                continue
            identity.created_seq, identity.turns, identity.dormant = self._next_seq(), [], True
            identity.history_run, identity.unseen = None, False
            self.identities[identity.subagent_id] = identity

    def registry_entry(self, identity: Identity) -> dict[str, Any]:
        """What the parent session's registry keeps of ``identity``: no queued work, no run ids."""
        entry = _identity_dict(identity)
        entry.update(turns=[], unseen=False, history_run=None, dormant=True)
        return entry

    def identity(self, subagent_id: str) -> Identity:
        """The identity named ``subagent_id``; a ToolError listing the known ones otherwise."""
        found = self.identities.get(subagent_id)
        if found is None:
            known = ", ".join(sorted(self.identities)[:10]) or "none yet"
            raise ToolError(f"no subagent {subagent_id!r} in this run (known: {known}); list them with list_subagents")
        return found

    # -- what the engine does with turns ------------------------------------------------

    def turns_to_start(self) -> list[tuple[Identity, Turn]]:
        """The queued turns to start now, oldest first, keeping at most ``max_concurrent`` running.

        One turn per identity at a time: a conversation's turns follow each other.
        """
        running = sum(1 for i in self.identities.values() for t in i.turns if t.status == "running")
        free = self.limits.max_concurrent - running
        heads = [(i, i.turns[0]) for i in self.identities.values() if i.turns and i.turns[0].status == "queued"]
        heads.sort(key=lambda pair: pair[1].queued_seq)
        started = heads[: max(free, 0)]
        for _, turn in started:
            turn.status = "running"
        return started

    def turn_ended(
        self, subagent_id: str, number: int, outcome: Outcome, text: str | None, run_id: str | None = None
    ) -> bool:
        """Record how turn ``number`` ended: a completed turn's answer (cut to size) and its child run
        ``run_id`` (where the conversation continues), else its error. False when already recorded."""
        identity = self.identity(subagent_id)
        if not identity.turns or identity.turns[0].number != number:
            return False  # already recorded: a step's commit may be replayed after a lost race
        identity.turns.pop(0)
        identity.last_outcome, identity.unseen = outcome, True
        if outcome == "completed":
            identity.completed_turns += 1
            identity.history_run = run_id or identity.history_run
            identity.last_response, identity.last_error = self.bounded(text or ""), None
        else:
            identity.last_error = self.bounded(text or outcome)
        return True

    # -- what the parent's model is shown ----------------------------------------------

    def progress(self, subagent_ids: list[str] | None) -> tuple[bool, list[Identity]]:
        """(whether a wait may return now, the identities it reports): progress was made or nothing works."""
        if subagent_ids is None:  # every identity of this run: not the dormant ones restored from its session
            selected = [i for i in self.identities.values() if not i.dormant]
        else:
            selected = [self.identity(i) for i in subagent_ids]
        ready = any(i.unseen for i in selected) or not any(i.working for i in selected)
        return ready, selected

    def snapshot(self, identity: Identity, *, mark_seen: bool = True) -> dict[str, Any]:
        """The model-facing view of one identity."""
        view: dict[str, Any] = {
            "subagent_id": identity.subagent_id,
            "kind": identity.kind,
            "status": identity.status,
            "completed_turns": identity.completed_turns,
            "queued_turns": sum(t.status == "queued" for t in identity.turns),
        }
        if identity.last_response is not None:
            view["response"] = identity.last_response
        if identity.last_error is not None and identity.last_outcome != "completed":
            view["error"] = identity.last_error
        if mark_seen:
            identity.unseen = False
        return view

    def listing(self, kind: str | None, limit: int, cursor: str | None) -> tuple[list[Identity], str | None]:
        """Identities newest first (of ``kind`` if given), ``limit`` of them after ``cursor``; and the next cursor.

        A cursor is the creation number of the last identity listed, as the string
        this method returned: a cursor that is not one is refused.
        """
        after = _cursor_seq(cursor)
        chosen = sorted(
            (i for i in self.identities.values() if kind is None or i.kind == kind),
            key=lambda i: i.created_seq,
            reverse=True,
        )
        if after is not None:
            chosen = [i for i in chosen if i.created_seq < after]
        page = chosen[:limit]
        more = len(chosen) > limit
        return page, (f"{CURSOR_PREFIX}{page[-1].created_seq}" if more else None)

    def bounded(self, text: str) -> str:
        """``text`` cut to ``max_response_chars``, noting the cut: what the parent's model reads of an answer."""
        limit = self.limits.max_response_chars
        return text if len(text) <= limit else text[:limit] + TRUNCATION_NOTE.format(limit=limit)

    # -- storage ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "parent_path": self.parent_path,
            "turns_queued_total": self.turns_queued_total,
            "seq": self.seq,
            "identities": [_identity_dict(i) for i in self.identities.values()],
            "waiters": {key: [ids, deadline] for key, (ids, deadline) in self.waiters.items()},
            "interjections": {key: [run_id, number] for key, (run_id, number) in self.interjections.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], limits: ManagerLimits) -> Ledger:
        ledger = cls(limits, data.get("parent_path", ROOT))
        ledger.turns_queued_total = int(data.get("turns_queued_total", 0))
        ledger.seq = int(data.get("seq", 0))
        for item in data.get("identities", ()):
            identity = _identity_from(item)
            ledger.identities[identity.subagent_id] = identity
        for key, (ids, deadline) in (data.get("waiters") or {}).items():
            ledger.waiters[key] = (None if ids is None else list(ids), float(deadline))
        for key, (run_id, number) in (data.get("interjections") or {}).items():
            ledger.interjections[key] = (str(run_id), int(number))
        return ledger

    def copy(self) -> Ledger:
        """A copy a transition may change without touching the state it started from."""
        return Ledger.from_dict(copy.deepcopy(self.to_dict()), self.limits)

    # -- internals ----------------------------------------------------------------------

    def _queue(self, identity: Identity, message: str) -> Turn:
        if len(message) > self.limits.max_message_chars:
            raise ToolError(f"the message is {len(message)} characters; at most {self.limits.max_message_chars}")
        number = identity.completed_turns + len(identity.turns) + 1
        turn = Turn(number, message, queued_seq=self._next_seq())
        identity.turns.append(turn)
        self.turns_queued_total += 1
        return turn

    def _check_turn_budget(self) -> None:
        if self.turns_queued_total >= self.limits.max_turns:
            raise ToolError(
                f"this run has used its {self.limits.max_turns} subagent turns; answer with what the subagents "
                "have reported"
            )

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq


def _cursor_seq(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    number = cursor.removeprefix(CURSOR_PREFIX)
    if not cursor.startswith(CURSOR_PREFIX) or not number.isdigit() or len(number) > 12:
        raise ToolError(f"cursor {cursor[:40]!r} is not one list_subagents returned; pass it back unchanged")
    return int(number)


def _identity_dict(identity: Identity) -> dict[str, Any]:
    return {
        "subagent_id": identity.subagent_id,
        "kind": identity.kind,
        "conversation_id": identity.conversation_id,
        "created_seq": identity.created_seq,
        "turns": [
            {"number": t.number, "message": t.message, "status": t.status, "seq": t.queued_seq} for t in identity.turns
        ],
        "completed_turns": identity.completed_turns,
        "last_outcome": identity.last_outcome,
        "last_response": identity.last_response,
        "last_error": identity.last_error,
        "unseen": identity.unseen,
        "history_run": identity.history_run,
        "created_at": identity.created_at,
        "dormant": identity.dormant,
    }


def _identity_from(data: dict[str, Any]) -> Identity:
    return Identity(
        subagent_id=data["subagent_id"],
        kind=data["kind"],
        conversation_id=data["conversation_id"],
        created_seq=data["created_seq"],
        turns=[Turn(t["number"], t["message"], t["status"], t["seq"]) for t in data.get("turns", ())],
        completed_turns=data.get("completed_turns", 0),
        last_outcome=data.get("last_outcome"),
        last_response=data.get("last_response"),
        last_error=data.get("last_error"),
        unseen=bool(data.get("unseen", False)),
        history_run=data.get("history_run"),
        created_at=float(data.get("created_at", 0.0)),
        dormant=bool(data.get("dormant", False)),
    )


__all__ = ["Identity", "Ledger", "Outcome", "TRUNCATION_NOTE", "Turn"]
