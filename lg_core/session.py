"""Session: one conversation, continued across runs and processes (spec: LittleGhost::Session).

    session = Session("conversation-42", actor_id="user-7", store=MemorySessionStore())
    session.append([Message(role="user", content="Hello")], state={"language": "en"})

    reopened = Session("conversation-42", actor_id="user-7", store=session.store)
    reopened.history()[-1].text      # "Hello"
    reopened.state["language"]       # "en"

A Session reads its store once (lazily, on first use) and remembers the
snapshot it saw; ``append`` then expects the store to still hold that many
messages, so a write based on a stale view fails with ProtocolError instead
of silently dropping someone else's turn. ``actor_id`` must come from
authenticated application state: the session belongs to the actor whose write
created it, another actor naming it gets SessionActorError, and no actor means
no tenant isolation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

from lg_core.config import current_configuration
from lg_core.datamap import DataMap, deep_freeze
from lg_core.errors import InvocationError
from lg_core.messages import Message
from lg_core.sessions.base import (
    TURN_RECORD,
    SessionSnapshot,
    SessionStore,
    as_snapshot,
    canonical_mapping,
    load_snapshot,
    persistable,
    session_key,
)

_UNLOADED = object()


class Session:
    """A conversation's messages, application state and metadata behind a SessionStore."""

    def __init__(
        self,
        id: str,
        *,
        store: SessionStore | None = None,
        actor_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        operation_id: str | None = None,
    ) -> None:
        self.id, self.actor_id = session_key(id, actor_id)
        if store is not None and not isinstance(store, SessionStore):
            raise InvocationError(f"store must be a SessionStore, got {type(store).__name__}")
        self._store = store
        self.operation_id = operation_id
        self._initial_metadata = canonical_mapping(metadata, "metadata")
        self._snapshot: Any = _UNLOADED
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        actor = f" actor={self.actor_id!r}" if self.actor_id is not None else ""
        return f"<Session {self.id!r}{actor}>"

    @property
    def store(self) -> SessionStore:
        """The store; without one given, the current runtime's (resolved on first use)."""
        if self._store is None:
            self._store = current_configuration().runtime().session_store
            if self._store is None:
                raise InvocationError("sessions are disabled in this configuration (session_store='none'); pass store=")
        return self._store

    # -- reading ---------------------------------------------------------------------------

    def load(self) -> SessionSnapshot | None:
        """The stored snapshot, read once; None for a new session."""
        return self._load(self.operation_id)

    def _load(self, operation_id: str | None) -> SessionSnapshot | None:
        with self._lock:
            if self._snapshot is _UNLOADED:
                with self.store.with_operation_context(operation_id):
                    self._snapshot = load_snapshot(self.store, self.id, self.actor_id)
            return cast("SessionSnapshot | None", self._snapshot)

    def _reload_after_run_write(self) -> None:
        """Read the store again on next use: a completed run wrote its turn to this session
        through the engine's commit, not through this object, so a snapshot read before
        would miss the turn and refuse the next write for a count the run changed."""
        with self._lock:
            self._snapshot = _UNLOADED

    def history(self, fallback: Iterable[Any] = ()) -> tuple[Message, ...]:
        """The stored messages when there are any, else ``fallback`` (for a new session)."""
        if isinstance(fallback, (str, bytes, Mapping, Message)) or not isinstance(fallback, Iterable):
            # A string would be taken one message per character, a Message (or its dict) one per field.
            raise TypeError(f"history(fallback=...) takes a list of messages, got {type(fallback).__name__}")
        snapshot = self.load()
        if snapshot is not None and snapshot.messages:
            return snapshot.messages
        return tuple(Message.coerce(m) for m in fallback)

    @property
    def state(self) -> DataMap:
        """A mutable copy of the stored state: change it and pass it to ``append(state=...)``."""
        snapshot = self.load()
        return DataMap(snapshot.state if snapshot is not None else {})

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The stored metadata, else the metadata given at construction (read-only).

        Without the framework's record of the last run's turn (``TURN_RECORD``),
        which holds a copy of the state before that turn: a write through this
        Session (metadata defaults to this) drops it, so scrubbing the state
        leaves no copy behind.
        """
        snapshot = self.load()
        stored = snapshot.metadata if snapshot is not None else self._initial_metadata
        return cast(
            "Mapping[str, Any]", deep_freeze({key: value for key, value in stored.items() if key != TURN_RECORD})
        )

    # -- writing ---------------------------------------------------------------------------

    def append(self, messages: Iterable[Any], *, state: Any = None, metadata: Any = None) -> SessionSnapshot:
        """Add ``messages`` while the store still holds the history this Session loaded.

        ``state`` and ``metadata`` default to the current ones. The store receives
        the messages without system messages, transient messages and private
        reasoning, and string-keyed JSON state and metadata, so an application's own
        store (the spec's DatabaseSessionStore) can save what it is given. Raises
        ProtocolError when another writer changed the session first.
        """
        return self._append(messages, state, metadata, self.operation_id)

    def _append(self, messages: Iterable[Any], state: Any, metadata: Any, operation_id: str | None) -> SessionSnapshot:
        kept = persistable(messages)  # the store receives only what a session may keep
        with self._lock:
            current = self._load(operation_id)
            expected = 0 if current is None else current.count
            state, metadata = self._state_for(state), self._metadata_for(metadata)
            with self.store.with_operation_context(operation_id):
                written = self.store.append(
                    self.id,
                    messages=kept,
                    state=state,
                    metadata=metadata,
                    expected_count=expected,
                    actor_id=self.actor_id,
                )
            before = () if current is None else current.messages
            return self._remember(written, lambda: before + kept, state, metadata)

    def replace(self, messages: Iterable[Any], *, state: Any = None, metadata: Any = None) -> SessionSnapshot:
        """Replace the whole stored snapshot."""
        return self._replace(messages, state, metadata, self.operation_id)

    def _replace(self, messages: Iterable[Any], state: Any, metadata: Any, operation_id: str | None) -> SessionSnapshot:
        kept = persistable(messages)
        with self._lock:
            state, metadata = self._state_for(state), self._metadata_for(metadata)
            with self.store.with_operation_context(operation_id):
                written = self.store.replace(
                    self.id, messages=kept, state=state, metadata=metadata, actor_id=self.actor_id
                )
            return self._remember(written, lambda: kept, state, metadata)

    def checkpoint(
        self,
        messages: Iterable[Any],
        *,
        state: Any = None,
        metadata: Any = None,
        parent_operation_id: str | None = None,
    ) -> SessionSnapshot:
        """Persist a whole conversation: append its new tail when the stored history is
        an unchanged prefix of it, replace the snapshot otherwise.

        The store calls run in ``store.with_operation_context(parent_operation_id)``
        (default: this Session's ``operation_id``), so a store's telemetry can
        parent them to the caller's operation.
        """
        operation_id = self.operation_id if parent_operation_id is None else parent_operation_id
        conversation = persistable(messages)
        with self._lock:
            snapshot = self._load(operation_id)
            stored = () if snapshot is None else snapshot.messages
            if conversation[: len(stored)] == stored:
                return self._append(conversation[len(stored) :], state, metadata, operation_id)
            return self._replace(conversation, state, metadata, operation_id)

    def checkpoint_result(self, result: Any) -> SessionSnapshot:
        """Checkpoint the conversation and state of a finished Run or RunResult."""
        value = getattr(result, "result", result)
        messages = getattr(value, "messages", None)
        if messages is None:
            raise InvocationError("checkpoint_result needs a completed Run or its RunResult (it has no messages)")
        return self.checkpoint(messages, state=getattr(value, "state", None))

    def project_conversation(self, messages: Iterable[Any], *, metadata: Any = None) -> Any:
        """Hand a conversational view to stores that publish one; the transcript is unchanged."""
        metadata = self._metadata_for(metadata)
        with self.store.with_operation_context(self.operation_id):
            return self.store.project_conversation(
                self.id, messages=messages, metadata=metadata, actor_id=self.actor_id
            )

    @contextmanager
    def synchronize(self) -> Iterator[None]:
        """Serialize work on this session within its store instance."""
        with self.store.synchronize(self.id, actor_id=self.actor_id):
            yield

    def _remember(
        self, written: Any, messages: Callable[[], tuple[Message, ...]], state: Any, metadata: Any
    ) -> SessionSnapshot:
        """Keep the snapshot a successful write left as the base of later updates.

        A store may return it, or (like the spec's example store) nothing: the
        snapshot is then what was written, sanitized as every store must.
        """
        if written is None:
            snapshot = SessionSnapshot(
                messages(), canonical_mapping(state, "state"), canonical_mapping(metadata, "metadata")
            )
        else:
            snapshot = cast(SessionSnapshot, as_snapshot(written, self.store))  # not None for a value
        self._snapshot = snapshot
        return snapshot

    def _state_for(self, state: Any) -> dict[str, Any]:
        """The state a write hands the store: string-keyed JSON, as the SessionStore contract says."""
        return canonical_mapping(self.state if state is None else state, "state")

    def _metadata_for(self, metadata: Any) -> dict[str, Any]:
        return canonical_mapping(self.metadata if metadata is None else metadata, "metadata")


__all__ = ["Session"]
