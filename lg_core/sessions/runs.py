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
  (:meth:`RunSessions.write_external`, idempotent if the commit is retried).

Failed, partial and cancelled runs leave their session unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lg_core.datamap import DataMap
from lg_core.errors import ConfigurationError
from lg_core.messages import Message
from lg_core.sessions.base import SessionStore, count_conflict, persistable
from lg_core.sessions.sql import SqlSessionStore
from lg_core.store.records import SessionWrite

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
        if actor is not None and (not isinstance(actor, str) or not actor.strip()):
            raise ConfigurationError(
                f"session_actor must return a non-empty string actor id or None, got {actor!r} "
                f"for run {invocation.run_id}"
            )
        return actor

    def open(self, run: Run, hooks: Sequence[Any] = ()) -> Opening:
        """History and initial state for ``run``, which starts executing now."""
        invocation = run.invocation
        fallback = tuple(invocation.history)
        if self.store is None:
            return Opening(fallback, invocation.context.copy(), None)
        snapshot = self.store.load(invocation.session_id, actor_id=run.session_actor_id)
        stored = snapshot.messages if snapshot is not None else ()
        history = stored or fallback
        for hook in hooks:
            chosen = hook.session_history(run, stored=stored, fallback=fallback)
            if chosen is not None:
                history = _hook_history(hook, chosen)
                break
        state = DataMap(snapshot.state if snapshot is not None else {})
        for key, value in invocation.context.items():
            state[key] = value
        return Opening(history, state, len(stored))

    @staticmethod
    def checkpoint_info(opening: Opening, messages: Sequence[Message], invocation_message: Message) -> dict[str, int] | None:
        """``{"count", "skip"}`` for the frame checkpoint: the session's count and where the turn starts."""
        if opening.stored_count is None:
            return None
        skip = 0
        if opening.stored_count > 0:
            positions = [i for i, m in enumerate(messages) if m == invocation_message]
            skip = positions[-1] if positions else max(len(messages) - 1, 0)
        return {"count": opening.stored_count, "skip": skip}

    def completion_write(self, run: Run, info: dict[str, int] | None, conversation: Sequence[Message], state: dict[str, Any]) -> SessionWrite | None:
        """The session write of a completed run, or None when it has no session."""
        if self.store is None or info is None:
            return None
        invocation = run.invocation
        turn = persistable(conversation[info["skip"] :])
        return SessionWrite(invocation.session_id, run.session_actor_id, turn, dict(state), info["count"])

    def write_external(self, write: SessionWrite) -> None:
        """Append ``write`` to a store outside the run store's database.

        Runs before the run's final commit, which may be retried (a version
        conflict, a late interjection): messages this run already appended are
        recognized and not appended twice. Anything else changed since the run
        loaded the session raises ProtocolError.
        """
        store = self.store
        assert store is not None
        key = (write.session_id, write.actor_id)
        with store.synchronize(*key):
            snapshot = store.load(write.session_id, actor_id=write.actor_id)
            stored = snapshot.messages if snapshot is not None else ()
            done = stored[write.expected_count :]
            ours = write.messages
            if len(stored) < write.expected_count or _dicts(done) != _dicts(ours[: len(done)]):
                raise count_conflict(key, len(stored), write.expected_count)
            store.append(
                write.session_id,
                messages=ours[len(done) :],
                state=write.state,
                metadata=snapshot.metadata if snapshot is not None else {},
                expected_count=len(stored),
                actor_id=write.actor_id,
            )


def _hook_history(hook: Any, chosen: Any) -> tuple[Message, ...]:
    try:
        return tuple(Message.coerce(m) for m in chosen)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"{type(hook).__name__}.session_history must return a list of Message or None: {exc}"
        ) from None


def _dicts(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in messages]


__all__ = ["Opening", "RunSessions"]
