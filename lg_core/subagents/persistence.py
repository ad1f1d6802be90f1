"""Managed children kept in the parent's session: framework-owned sessions for transcripts and the registry.

With a session store, every completed turn of a child whose definition persists
(``persist=True``, the default) writes two snapshots under the parent run's
persistence actor, so another tenant cannot read them:

* the child's **conversation session** (:func:`conversation_session_id`, derived
  from the identity's durable conversation id): its compact transcript, the
  persistable messages of the turn's child run (no system, transient or
  reasoning content), at most ``MAX_TRANSCRIPT_MESSAGES`` of them starting at a
  user message, and a small state snapshot (the identity and its last answer);
* the parent session's **registry** (:func:`registry_session_id`, derived from
  the parent session id and actor): one entry per persisted identity, newest
  first, at most ``MAX_REGISTRY_ENTRIES``; no transcripts, so listing children
  restores none of them.

Both are whole-snapshot replaces, made in the turn step's own commit when the
session store lives in the run store's database (``StepCommit.session_replaces``)
and just before it otherwise: a crash between the two re-executes the step, which
writes the same snapshots again, so nothing is lost or duplicated. A failed or
cancelled turn writes nothing: only completed turns become history.

A later run of the same session seeds its ledger from the registry (the
identities are dormant: listed, not restored, and not counted against
``max_identities``); a follow-up to one loads its conversation session as the
turn's history.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from lg_core.messages import Message
from lg_core.sessions.base import SessionStore, load_snapshot, persistable
from lg_core.store.records import SessionReplace
from lg_core.store.session_transactions import actor_key

MAX_TRANSCRIPT_MESSAGES = 200
MAX_REGISTRY_ENTRIES = 256
REGISTRY_KEY = "subagents"
ENTRY_KEY = "subagent"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:40]


def conversation_session_id(conversation_id: str) -> str:
    """The framework-owned session holding one child conversation's transcript."""
    return f"lg-subagent-conversation:{_digest('conversation', conversation_id)}"


def registry_session_id(session_id: str, actor_id: str | None) -> str:
    """The framework-owned session listing the persisted children of one parent session."""
    return f"lg-subagent-registry:{_digest('registry', session_id, actor_key(actor_id))}"


def parent_link(session_id: str, actor_id: str | None) -> str:
    """A pseudonymous link to the parent session for the children's metadata (not its id)."""
    return _digest("parent", session_id, actor_key(actor_id))


def compact_transcript(messages: Iterable[Any]) -> tuple[Message, ...]:
    """The persistable messages, cut to the newest ``MAX_TRANSCRIPT_MESSAGES`` starting at a user message,
    so a restored conversation never opens with a tool result whose call was cut away."""
    kept = persistable(list(messages))
    if len(kept) <= MAX_TRANSCRIPT_MESSAGES:
        return kept
    tail = kept[-MAX_TRANSCRIPT_MESSAGES:]
    for index, message in enumerate(tail):
        if message.role == "user" and not any(getattr(block, "kind", "") == "tool_result" for block in message.content):
            return tail[index:]
    return tail[-1:]


class ChildPersistence:
    """The parent run's side of persisted children: where they live and who owns them."""

    def __init__(self, store: SessionStore, in_commit: bool, session_id: str, actor_id: str | None) -> None:
        self.store, self.in_commit = store, in_commit
        self.session_id, self.actor_id = session_id, actor_id

    @classmethod
    def of(cls, scope: Any) -> ChildPersistence | None:
        """The persistence of ``scope``'s run, or None when sessions are disabled."""
        sessions = scope.engine.sessions
        if not sessions.enabled or sessions.store is None:
            return None
        run = scope.run
        return cls(sessions.store, bool(sessions.in_store), run.invocation.session_id, run.session_actor_id)

    @property
    def registry_id(self) -> str:
        return registry_session_id(self.session_id, self.actor_id)

    def registry(self) -> list[dict[str, Any]]:
        """The persisted identities' entries, newest first (SessionActorError for another tenant)."""
        snapshot = load_snapshot(self.store, self.registry_id, self.actor_id)
        if snapshot is None:
            return []
        entries = snapshot.state.get(REGISTRY_KEY) or []
        return [dict(entry) for entry in entries if isinstance(entry, dict)]

    def transcript(self, conversation_id: str) -> list[Message]:
        """A persisted child's committed conversation: the history its next turn continues from."""
        snapshot = load_snapshot(self.store, conversation_session_id(conversation_id), self.actor_id)
        return [] if snapshot is None else list(snapshot.messages)

    def turn_snapshots(
        self, entry: dict[str, Any], transcript: Sequence[Message], registry: list[dict[str, Any]]
    ) -> tuple[SessionReplace, ...]:
        """The two snapshots a completed turn writes: its conversation and the registry listing it."""
        link = {"lg_subagent": {"parent": parent_link(self.session_id, self.actor_id)}}
        entries = sorted(registry, key=lambda e: float(e.get("created_at", 0.0)), reverse=True)
        return (
            SessionReplace(
                conversation_session_id(entry["conversation_id"]),
                self.actor_id,
                tuple(compact_transcript(transcript)),
                {ENTRY_KEY: entry},
                link,
            ),
            SessionReplace(self.registry_id, self.actor_id, (), {REGISTRY_KEY: entries[:MAX_REGISTRY_ENTRIES]}, link),
        )

    def write_outside_commit(self, snapshots: Sequence[SessionReplace]) -> None:
        """Write ``snapshots`` to a store outside the run store's database (before the step's commit)."""
        for snapshot in snapshots:
            with self.store.synchronize(snapshot.session_id, snapshot.actor_id):
                self.store.replace(
                    snapshot.session_id,
                    messages=snapshot.messages,
                    state=snapshot.state,
                    metadata=snapshot.metadata,
                    actor_id=snapshot.actor_id,
                )


__all__ = [
    "ChildPersistence",
    "MAX_REGISTRY_ENTRIES",
    "MAX_TRANSCRIPT_MESSAGES",
    "compact_transcript",
    "conversation_session_id",
    "parent_link",
    "registry_session_id",
]
