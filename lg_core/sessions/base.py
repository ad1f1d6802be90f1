"""SessionStore: the contract between LittleGhost conversations and persistence.

A session belongs to the actor whose write created it (``actor_id``, or None
for a store that serves one actor). Naming its id with any other actor, None
included, raises SessionActorError on every read and write: a session id alone
proves nothing about who is asking, so a store never lets one actor read or
extend another's conversation. Two actors racing to create one session end
with one owner; the other gets the error. A snapshot holds the session's
messages, its application state and its metadata.

Every store (memory, filesystem, SQL, or an application's own subclass)
follows the same rules, checked by one conformance suite
(``tests/sessions/test_conformance.py``):

* ``load(id, actor_id=None)`` returns the snapshot or None before the first
  write; SessionActorError when another actor's write created the session.
* ``append(id, messages=, state=, metadata=, expected_count=, actor_id=None)``
  adds messages only while the stored history still has ``expected_count``
  messages, checked atomically; otherwise it raises ProtocolError and writes
  nothing. That check is what keeps two writers from silently losing a turn.
* ``replace(...)`` swaps the whole snapshot atomically.
* Messages are stored without system messages, transient messages
  (``metadata={"transient": True}``) and private reasoning
  (:func:`persistable`); state and metadata are stored as string-keyed JSON
  (:func:`canonical_mapping`), and a value JSON cannot represent raises
  ProtocolError without touching the stored snapshot.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import ValidationError

from lg_core.content import Reasoning
from lg_core.datamap import to_json_value
from lg_core.errors import AbstractMethodError, InvocationError, ProtocolError
from lg_core.invocation import _identifier  # the one id rule shared with invocations
from lg_core.messages import Message

SessionKey = tuple[str, str | None]
# Snapshot metadata the framework writes: the run whose turn a write to a store outside
# the run store added (lg_core.sessions.run_sessions). Not the application's: Session hides it.
TURN_RECORD = "lg_turn"


@dataclass(frozen=True, slots=True)
class SessionSnapshot:
    """One stored session: messages, string-keyed JSON state and metadata."""

    messages: tuple[Message, ...]
    state: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """How many messages the session holds (what ``expected_count`` is compared with)."""
        return len(self.messages)


# -- input rules shared by every store ---------------------------------------------------


def session_key(id: Any, actor_id: Any = None) -> SessionKey:
    """The validated ``(id, actor_id)`` pair; InvocationError names the bad part."""
    return _identifier(id, "session id"), None if actor_id is None else _identifier(actor_id, "actor_id")


def is_transient(message: Message) -> bool:
    """Transient messages (``metadata={"transient": True}``) live for one run only."""
    return bool(message.metadata.get("transient"))


def persistable(messages: Iterable[Any]) -> tuple[Message, ...]:
    """The messages a session may keep: no system or transient messages, no reasoning.

    A message left with no content once its reasoning is removed is dropped too.
    """
    if isinstance(messages, (str, bytes, Mapping, Message)) or not isinstance(messages, Iterable):
        raise InvocationError("messages must be a list of Message objects")
    kept = []
    for index, item in enumerate(messages):
        message = _message(item, index)
        if message.role == "system" or is_transient(message):
            continue
        if any(isinstance(block, Reasoning) for block in message.content):
            message = message.without_reasoning()
            if not message.content:
                continue
        kept.append(message)
    return tuple(kept)


def _message(item: Any, index: int) -> Message:
    if isinstance(item, Message):
        return item
    if not isinstance(item, Mapping):
        raise InvocationError(f"messages[{index}] is a {type(item).__name__}, not a Message")
    try:
        return Message.coerce(item)
    except (ValidationError, TypeError, ValueError) as exc:
        raise InvocationError(f"messages[{index}] is not a valid message: {exc}") from None


def canonical_mapping(value: Any, name: str) -> dict[str, Any]:
    """``value`` as string-keyed JSON; ProtocolError when JSON cannot represent it."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvocationError(f"session {name} must be a mapping, got {type(value).__name__}")
    try:
        return cast(dict[str, Any], to_json_value(value, path=name))
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"session {name} cannot be stored as JSON: {exc}") from None


def as_snapshot(value: Any, store: Any = None) -> SessionSnapshot | None:
    """What a store's ``load`` (or write) returned, as a SessionSnapshot.

    The spec's snapshot is a mapping of ``messages``, ``state`` and ``metadata``,
    and its example store returns its database row's mapping as is, so an
    application's store may return that instead of a SessionSnapshot. Anything
    else is a broken store: ProtocolError, naming it.
    """
    if value is None or isinstance(value, SessionSnapshot):
        return value
    source = type(store).__name__ if store is not None else "the session store"
    if not isinstance(value, Mapping) or "messages" not in value:
        raise ProtocolError(
            f"{source} returned {type(value).__name__} for a session snapshot; a store returns a SessionSnapshot, "
            "a mapping with 'messages', 'state' and 'metadata', or None for a session not written yet"
        )
    try:
        items = value["messages"]
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            raise InvocationError("messages must be a list of messages")
        messages = tuple(_message(item, index) for index, item in enumerate(items))
        state = canonical_mapping(value.get("state"), "state")
        metadata = canonical_mapping(value.get("metadata"), "metadata")
    except (InvocationError, ProtocolError) as exc:
        raise ProtocolError(f"{source} returned an invalid session snapshot: {exc}") from None
    return SessionSnapshot(messages, state, metadata)


def load_snapshot(store: SessionStore, id: str, actor_id: str | None) -> SessionSnapshot | None:
    """``store.load(id, actor_id=...)`` as a SessionSnapshot (see :func:`as_snapshot`)."""
    return as_snapshot(store.load(id, actor_id=actor_id), store)


def check_expected_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvocationError(f"expected_count must be a non-negative integer, got {value!r}")
    return value


def count_conflict(key: SessionKey, stored: int, expected: int) -> ProtocolError:
    """The error every store raises when another writer changed the session first."""
    session_id, actor_id = key
    owner = f" of actor {actor_id!r}" if actor_id is not None else ""
    return ProtocolError(
        f"session {session_id!r}{owner} has {stored} messages but the append expected {expected}: "
        "another writer changed it first; load the session again and retry with its current history"
    )


# -- the base class ------------------------------------------------------------------------


class SessionStore:
    """Base class of every session store; subclasses implement load, append and replace.

    ``synchronize`` serializes work on one session within this store instance
    (a per-key lock). Coordination across processes is each store's own
    business: the SQL store checks counts in a transaction, the filesystem
    store takes a file lock.
    """

    def __init__(self) -> None:
        self._sync_guard = threading.Lock()
        self._sync_locks: weakref.WeakValueDictionary[SessionKey, Any] = weakref.WeakValueDictionary()

    def load(self, id: str, actor_id: str | None = None) -> SessionSnapshot | None:
        """The snapshot of session ``id`` for ``actor_id``, or None before its first write."""
        raise AbstractMethodError(f"{type(self).__name__} must implement load(id, actor_id=None)")

    def append(
        self,
        id: str,
        *,
        messages: Iterable[Any],
        state: Mapping[str, Any] | None,
        metadata: Mapping[str, Any] | None,
        expected_count: int,
        actor_id: str | None = None,
    ) -> SessionSnapshot:
        """Add ``messages`` atomically while the stored history has ``expected_count`` messages."""
        raise AbstractMethodError(f"{type(self).__name__} must implement append(...)")

    def replace(
        self,
        id: str,
        *,
        messages: Iterable[Any],
        state: Mapping[str, Any] | None,
        metadata: Mapping[str, Any] | None,
        actor_id: str | None = None,
    ) -> SessionSnapshot:
        """Replace the whole snapshot atomically."""
        raise AbstractMethodError(f"{type(self).__name__} must implement replace(...)")

    def project_conversation(
        self, id: str, *, messages: Iterable[Any], metadata: Mapping[str, Any] | None, actor_id: str | None = None
    ) -> None:
        """Publish a conversational view elsewhere; built-in stores have none (a no-op)."""
        return None

    @contextmanager
    def with_operation_context(self, operation_id: str | None) -> Iterator[None]:
        """Run one store operation under the telemetry operation ``operation_id`` (or None).

        Sessions wrap each of their store calls in it, with their
        ``operation_id``. The default does nothing; a store that reports to a
        tracing system overrides it to parent its own spans there.
        """
        yield

    @contextmanager
    def synchronize(self, id: str, actor_id: str | None = None) -> Iterator[None]:
        """Hold this instance's lock for one session while the block runs."""
        key = session_key(id, actor_id)
        guard = self.__dict__.get("_sync_guard")
        if guard is None:  # a subclass that did not call super().__init__()
            SessionStore.__init__(self)
            guard = self._sync_guard
        with guard:
            lock = self._sync_locks.get(key)
            if lock is None:
                lock = _Lock()
                self._sync_locks[key] = lock
        with lock:
            yield

    def _prepare(
        self, id: Any, actor_id: Any, messages: Iterable[Any], state: Any, metadata: Any
    ) -> tuple[SessionKey, tuple[Message, ...], dict[str, Any], dict[str, Any]]:
        """Validate and normalize one write's arguments (shared by the built-in stores)."""
        key = session_key(id, actor_id)
        return key, persistable(messages), canonical_mapping(state, "state"), canonical_mapping(metadata, "metadata")


class _Lock:
    """A re-entrant lock that can live in a WeakValueDictionary (RLock objects cannot)."""

    __slots__ = ("_lock", "__weakref__")

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()


__all__ = [
    "SessionKey",
    "SessionSnapshot",
    "SessionStore",
    "as_snapshot",
    "canonical_mapping",
    "check_expected_count",
    "count_conflict",
    "is_transient",
    "load_snapshot",
    "persistable",
    "session_key",
]
