"""Processes that race others on one session (tests/sessions/test_conformance.py).

Kept apart from the test module so the racing code is all in one place.
``race``: each round every process waits at the barrier, then appends one
message with the count the session had at the start of the round; exactly one
may win. ``claim``: every process, as an actor of its own, creates the same
new session at once; exactly one may own it.
"""

from __future__ import annotations

from typing import Any

from lg_core.errors import ProtocolError, SessionActorError
from lg_core.messages import Message


def open_store(kind: str, location: str) -> Any:
    from lg_core.sessions import FilesystemSessionStore, SqlSessionStore

    return FilesystemSessionStore(location) if kind == "filesystem" else SqlSessionStore(location)


def race(kind: str, location: str, name: str, rounds: int, barrier: Any, results: Any) -> None:
    store = open_store(kind, location)
    try:
        for round_number in range(rounds):
            barrier.wait(timeout=60)
            try:
                store.append(
                    "raced",
                    messages=[Message(role="user", content=f"{name} round {round_number}")],
                    state={"last": name},
                    metadata=None,
                    expected_count=round_number,
                    actor_id="racer",
                )
                results.put((round_number, name, "won"))
            except ProtocolError:
                results.put((round_number, name, "lost"))
    except BaseException as exc:  # noqa: BLE001 - reported to the test, which fails on it
        results.put((-1, name, f"error: {exc!r}"))
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()


def claim(kind: str, location: str, actor: str, barrier: Any, results: Any) -> None:
    store = open_store(kind, location)
    try:
        barrier.wait(timeout=60)
        store.append(
            "contested",
            messages=[Message(role="user", content=f"from {actor}")],
            state={"by": actor},
            metadata=None,
            expected_count=0,
            actor_id=actor,
        )
        results.put((actor, "won"))
    except SessionActorError:
        results.put((actor, "refused"))
    except BaseException as exc:  # noqa: BLE001 - reported to the test, which fails on it
        results.put((actor, f"error: {exc!r}"))
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
