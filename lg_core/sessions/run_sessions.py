"""How a run uses its session: the engine's side of sessions.

* When a run **starts executing** (at once, or when its turn on the session
  comes), :meth:`RunSessions.open` loads the session: the run's history is
  the stored messages (the invocation's ``history`` is the fallback for a new
  session, and ``Hook.session_history`` may choose another), and its initial
  ``context.state`` is the session state merged with the invocation context
  (the invocation wins). The stored count and where the run's own turn starts
  are kept in the frame checkpoint (``checkpoint.session``).
* When the run **completes**, :meth:`RunSessions.completion_write` makes the
  turn to append: the conversation from the run's input message on (all of it
  for a new session), without system, transient or reasoning content, and the
  final state, expecting the count the run started from. With the default SQL
  store in the run store's database the RunStore appends it inside the run's
  final commit; any other store is written just before that commit
  (:meth:`RunSessions.write_external`).

Failed, partial and cancelled runs leave their session unchanged.

An external write can outlive the commit it was made for: the process may die
before the commit (the run is then resumed and executes its last step again),
or the commit may be refused (a late interjection: the run goes on, and may
fail). So the write records itself in the snapshot's metadata (``lg_turn``:
the run, the counts before and after its turn, the state before it), and while
it is the session's latest write the run treats it as not yet done: its
opening loads the session without it, a new write of its turn replaces it, and
:meth:`RunSessions.withdraw` restores the session as it was before it when the
run will not complete with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lg_core.datamap import DataMap
from lg_core.errors import ConfigurationError
from lg_core.messages import Message
from lg_core.run_ids import ID_PATTERN, ID_RULE
from lg_core.sessions.base import (
    TURN_RECORD,
    SessionSnapshot,
    SessionStore,
    load_snapshot,
    persistable,
)
from lg_core.sessions.sql import SqlSessionStore
from lg_core.store.records import SessionWrite

TURN = TURN_RECORD  # snapshot metadata: the run whose turn an external write added (module docstring)

if TYPE_CHECKING:
    from lg_core.invocation import Invocation
    from lg_core.run import Run
    from lg_core.store import RunStore


@dataclass(frozen=True, slots=True)
class Opening:
    """What a starting run takes from its session."""

    history: tuple[Message, ...]
    state: DataMap
    stored_count: int | None  # None when sessions are disabled


class RunSessions:
    """The bridge between runs and the configured SessionStore (None disables sessions)."""

    def __init__(
        self, store: SessionStore | None, run_store: RunStore, actor: Callable[[Invocation], Any] | None = None
    ) -> None:
        self.store = store
        self._actor = actor  # Configuration.session_actor
        # The turn is appended inside the run's final commit when the session
        # tables live in the run store's own database.
        self.in_store = isinstance(store, SqlSessionStore) and store.database is run_store.db

    @property
    def enabled(self) -> bool:
        return self.store is not None

    def actor_for(self, invocation: Invocation) -> str | None:
        """The persistence actor of a new run: ``session_actor(invocation)``, else its actor_id.

        Called once, where the run starts (the web app, with its authenticated
        user at hand); the run row keeps the result, so workers and later
        processes use the same actor without the callable.
        """
        if self._actor is None:
            return invocation.actor_id
        actor = self._actor(invocation)
        # The rule every actor_id follows (Invocation, session keys), checked here: a
        # bad id must fail before the run row exists, not at the run's first session read.
        if actor is not None and (not isinstance(actor, str) or not ID_PATTERN.fullmatch(actor)):
            raise ConfigurationError(
                f"session_actor must return a non-empty string actor id or None, got {actor!r} "
                f"for run {invocation.run_id}; an actor id is {ID_RULE}"
            )
        return actor

    def open(self, run: Run, hooks: Sequence[Any] = ()) -> Opening:
        """History and initial state for ``run``, which starts executing now."""
        invocation = run.invocation
        fallback = tuple(invocation.history)
        if self.store is None:
            return Opening(fallback, invocation.context.copy(), None)
        with self.store.with_operation_context(run.operation_id):
            snapshot = load_snapshot(self.store, invocation.session_id, run.session_actor_id)
        stored, stored_state = _before_turn_of(run.id, snapshot)
        history = stored or fallback
        for hook in hooks:
            chosen = hook.session_history(run, stored=stored, fallback=fallback)
            if chosen is not None:
                history = _hook_history(hook, chosen)
                break
        state = DataMap(stored_state)
        for key, value in invocation.context.items():
            state[key] = value
        return Opening(history, state, len(stored))

    @staticmethod
    def checkpoint_info(
        opening: Opening, messages: Sequence[Message], invocation_message: Message
    ) -> dict[str, int] | None:
        """``{"count", "skip"}`` for the frame checkpoint: the session's count and where the turn starts."""
        if opening.stored_count is None:
            return None
        skip = 0
        if opening.stored_count > 0:
            positions = [i for i, m in enumerate(messages) if m == invocation_message]
            skip = positions[-1] if positions else max(len(messages) - 1, 0)
        return {"count": opening.stored_count, "skip": skip}

    def completion_write(
        self, run: Run, info: dict[str, int] | None, conversation: Sequence[Message], state: dict[str, Any]
    ) -> SessionWrite | None:
        """The session write of a completed run, or None when it has no session."""
        if self.store is None or info is None:
            return None
        invocation = run.invocation
        turn = persistable(conversation[info["skip"] :])
        return SessionWrite(invocation.session_id, run.session_actor_id, turn, dict(state), info["count"])

    def write_external(self, run_id: str, write: SessionWrite) -> None:
        """Add run ``run_id``'s turn to a store outside the run store's database.

        Runs before the run's final commit. When this run's earlier write is
        still the session's latest (a commit retried after a conflict, or lost
        in a crash and executed again with other words), that turn is replaced;
        otherwise the turn is appended expecting the count the run started
        from, so a change by another writer raises ProtocolError.
        """
        store = self.store
        assert store is not None
        session_id, actor_id = write.session_id, write.actor_id
        with store.synchronize(session_id, actor_id), store.with_operation_context(run_id):
            snapshot = load_snapshot(store, session_id, actor_id)
            stored, before = _before_turn_of(run_id, snapshot)
            count = write.expected_count
            metadata = {**_unmarked(snapshot), TURN: _turn_record(run_id, write, before)}
            if snapshot is not None and len(stored) == count < snapshot.count:  # this run's earlier turn
                store.replace(
                    session_id,
                    messages=stored + tuple(write.messages),
                    state=write.state,
                    metadata=metadata,
                    actor_id=actor_id,
                )
            else:
                store.append(
                    session_id,
                    messages=write.messages,
                    state=write.state,
                    metadata=metadata,
                    expected_count=count,
                    actor_id=actor_id,
                )

    def withdraw(self, run: Run) -> None:
        """Restore ``run``'s session as it was before the run's turn, if that turn is its latest write.

        Called when the commit the turn was written for is refused (the run goes
        on) and when the run ends without completing. A no-op for the SQL store
        in the run store's database: there the turn is written by the commit.
        """
        store = self.store
        if store is None or self.in_store:
            return
        session_id, actor_id = run.invocation.session_id, run.session_actor_id
        with store.synchronize(session_id, actor_id), store.with_operation_context(run.operation_id):
            snapshot = load_snapshot(store, session_id, actor_id)
            turn = _turn_of(run.id, snapshot)
            if turn is None:
                return
            assert snapshot is not None
            store.replace(
                session_id,
                messages=snapshot.messages[: turn["from"]],
                state=turn["state"],
                metadata=_unmarked(snapshot),
                actor_id=actor_id,
            )


def _turn_record(run_id: str, write: SessionWrite, before: dict[str, Any]) -> dict[str, Any]:
    """The ``lg_turn`` record of ``write``: its run, the counts before and after it, the state before it."""
    count = write.expected_count
    return {"run_id": run_id, "from": count, "to": count + len(write.messages), "state": before}


def _turn_of(run_id: str, snapshot: SessionSnapshot | None) -> dict[str, Any] | None:
    """The ``lg_turn`` record of ``run_id``'s write when that write is the session's latest.

    A later writer that kept the metadata (``Session.append`` does) added messages,
    so the counts no longer match and the turn is theirs to keep.
    """
    if snapshot is None:
        return None
    turn = snapshot.metadata.get(TURN)
    if isinstance(turn, dict) and turn.get("run_id") == run_id and turn.get("to") == snapshot.count:
        return turn
    return None


def _before_turn_of(run_id: str, snapshot: SessionSnapshot | None) -> tuple[tuple[Message, ...], dict[str, Any]]:
    """The session's messages and state without ``run_id``'s own turn (written before a lost commit)."""
    if snapshot is None:
        return (), {}
    turn = _turn_of(run_id, snapshot)
    if turn is None:
        return snapshot.messages, snapshot.state
    return snapshot.messages[: turn["from"]], turn["state"]


def _unmarked(snapshot: SessionSnapshot | None) -> dict[str, Any]:
    """The snapshot's metadata without any run's ``lg_turn`` record."""
    return {} if snapshot is None else {k: v for k, v in snapshot.metadata.items() if k != TURN}


def _hook_history(hook: Any, chosen: Any) -> tuple[Message, ...]:
    """The history a ``session_history`` hook chose, as Messages; ConfigurationError otherwise.

    A string, a mapping or a single Message is iterable but is no list of
    messages (a string would become one user message per character).
    """
    problem = None
    if isinstance(chosen, (str, bytes, Mapping, Message)) or not isinstance(chosen, Iterable):
        problem = f"got {type(chosen).__name__}"
    else:
        try:
            return tuple(Message.coerce(m) for m in chosen)
        except (TypeError, ValueError) as exc:
            problem = str(exc)
    raise ConfigurationError(f"{type(hook).__name__}.session_history must return a list of Message or None: {problem}")


__all__ = ["Opening", "RunSessions"]
