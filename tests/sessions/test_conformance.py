"""One conformance suite for every SessionStore: memory, filesystem, SQLite in
memory and in a file, and a real PostgreSQL server (one
interface, several backends, one shared suite)."""

from __future__ import annotations

import enum
import json
import multiprocessing
import threading
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import text

from lg_core import (
    Image,
    InvocationError,
    Message,
    ProtocolError,
    Reasoning,
    SessionActorError,
    Text,
    ToolResult,
    ToolUse,
)
from lg_core.sessions import (
    FilesystemSessionStore,
    MemorySessionStore,
    SessionStore,
    SqlSessionStore,
)
from tests.sessions import race_worker

BACKENDS = ["memory", "filesystem", "sqlite-memory", "sqlite-file", "postgres"]
DURABLE = ("filesystem", "sqlite-file", "postgres")


class Backend:
    """One backend under test: ``open()`` gives a store over the same storage each time."""

    def __init__(self, kind: str, location: str | None) -> None:
        self.kind = kind
        self.location = location
        self._shared: SessionStore | None = None
        self._opened: list[SessionStore] = []

    def open(self) -> SessionStore:
        if self.kind == "memory":
            store = self._shared = self._shared or MemorySessionStore()
        elif self.kind == "sqlite-memory":
            store = self._shared = self._shared or SqlSessionStore("sqlite://")
        else:
            assert self.location is not None, f"the {self.kind} backend needs a location"
            if self.kind == "filesystem":
                store = FilesystemSessionStore(self.location)
            else:
                store = SqlSessionStore(self.location)
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            if hasattr(store, "close"):
                store.close()


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    kind = request.param
    location = {
        "filesystem": str(tmp_path / "sessions"),
        "sqlite-file": f"sqlite:///{tmp_path / 'sessions.db'}",
        "postgres": request.getfixturevalue("pg_url") if kind == "postgres" else None,
    }.get(kind)
    opened = Backend(kind, location)
    yield opened
    opened.close()


@pytest.fixture
def store(backend):
    return backend.open()


def user(text: str) -> Message:
    return Message(role="user", content=text)


def assistant(text: str) -> Message:
    return Message(role="assistant", content=text)


def append(store, messages, expected, *, id="conv-1", actor="user-7", state=None, metadata=None):
    return store.append(id, messages=messages, state=state, metadata=metadata, expected_count=expected, actor_id=actor)


# -- load, append, replace ------------------------------------------------------------------


def test_an_unknown_session_loads_as_none(store):
    assert store.load("never-written", actor_id="user-7") is None


def test_append_creates_the_session_then_extends_it(store):
    first = append(store, [user("Hello")], 0, state={"language": "en"}, metadata={"channel": "web"})
    second = append(store, [assistant("Hi! How can I help?")], 1, state={"language": "de"}, metadata={"channel": "app"})

    assert [m.text for m in first.messages] == ["Hello"]
    assert [m.text for m in second.messages] == ["Hello", "Hi! How can I help?"]
    loaded = store.load("conv-1", actor_id="user-7")
    assert loaded == second
    assert (loaded.count, loaded.state, loaded.metadata) == (2, {"language": "de"}, {"channel": "app"})


def test_append_with_a_stale_count_raises_protocol_error_and_writes_nothing(store):
    append(store, [user("one")], 0, state={"n": 1})

    with pytest.raises(ProtocolError, match="has 1 messages but the append expected 0"):
        append(store, [user("lost?")], 0, state={"n": 99})
    with pytest.raises(ProtocolError, match="expected 5"):
        append(store, [user("lost?")], 5)

    loaded = store.load("conv-1", actor_id="user-7")
    assert ([m.text for m in loaded.messages], loaded.state) == (["one"], {"n": 1})


def test_a_new_session_accepts_only_expected_count_zero(store):
    with pytest.raises(ProtocolError, match="has 0 messages"):
        append(store, [user("hi")], 1)
    assert store.load("conv-1", actor_id="user-7") is None


def test_an_emptied_session_accepts_an_append_expecting_zero(store):
    # The session exists with no messages: a first append finds it instead of creating it.
    store.replace("conv-1", messages=[], state={"n": 0}, metadata={"channel": "web"}, actor_id="user-7")
    snapshot = append(store, [user("again")], 0, state={"n": 1}, metadata={"channel": "app"})
    assert ([m.text for m in snapshot.messages], snapshot.state, snapshot.metadata) == (
        ["again"],
        {"n": 1},
        {"channel": "app"},
    )
    assert store.load("conv-1", actor_id="user-7") == snapshot
    with pytest.raises(ProtocolError, match="has 1 messages but the append expected 0"):
        append(store, [user("late")], 0)


def test_an_empty_append_updates_state_and_keeps_the_messages(store):
    append(store, [user("one")], 0, state={"step": 1})
    snapshot = append(store, [], 1, state={"step": 2})
    assert (snapshot.count, snapshot.state) == (1, {"step": 2})
    assert store.load("conv-1", actor_id="user-7").state == {"step": 2}


def test_replace_swaps_the_whole_snapshot_and_resets_the_count(store):
    append(store, [user("one"), assistant("two"), user("three")], 0, state={"a": 1}, metadata={"m": 1})

    replaced = store.replace("conv-1", messages=[user("summary")], state={"b": 2}, metadata={}, actor_id="user-7")

    assert ([m.text for m in replaced.messages], replaced.state, replaced.metadata) == (["summary"], {"b": 2}, {})
    assert store.load("conv-1", actor_id="user-7") == replaced
    with pytest.raises(ProtocolError):
        append(store, [user("stale")], 3)
    assert append(store, [user("next")], 1).count == 2


def test_replace_creates_a_missing_session(store):
    store.replace("fresh", messages=[user("hi")], state={}, metadata={"k": "v"}, actor_id=None)
    assert store.load("fresh").metadata == {"k": "v"}


def test_a_session_belongs_to_the_actor_whose_write_created_it(store):
    append(store, [user("from user-7")], 0, actor="user-7", state={"owner": "7"})

    for other in ("user-8", None):
        with pytest.raises(SessionActorError, match="'conv-1' belongs to another actor") as refused:
            store.load("conv-1", actor_id=other)
        assert "user-7" not in str(refused.value)  # the owner is not the caller's business
        with pytest.raises(SessionActorError):
            append(store, [user(f"from {other}")], 0, actor=other, state={"owner": other})
        with pytest.raises(SessionActorError):
            append(store, [user(f"from {other}")], 1, actor=other)
        with pytest.raises(SessionActorError):
            store.replace("conv-1", messages=[user("taken over")], state={}, metadata={}, actor_id=other)

    kept = store.load("conv-1", actor_id="user-7")
    assert ([m.text for m in kept.messages], kept.state) == (["from user-7"], {"owner": "7"})


def test_a_session_created_without_an_actor_refuses_every_actor(store):
    store.replace("shared", messages=[user("one-actor store")], state={}, metadata={}, actor_id=None)
    with pytest.raises(SessionActorError):
        store.load("shared", actor_id="user-7")
    with pytest.raises(SessionActorError):
        store.append("shared", messages=[user("mine now?")], state={}, metadata={}, expected_count=1, actor_id="user-7")
    assert [m.text for m in store.load("shared").messages] == ["one-actor store"]


def test_another_actor_is_refused_while_the_owner_emptied_the_session(store):
    append(store, [user("soon gone")], 0)
    store.replace("conv-1", messages=[], state={}, metadata={}, actor_id="user-7")
    with pytest.raises(SessionActorError):
        append(store, [user("an empty session is still owned")], 0, actor="user-8")
    assert store.load("conv-1", actor_id="user-7").count == 0


# -- what is persisted -------------------------------------------------------------------------


def test_system_and_transient_messages_and_reasoning_are_not_persisted(store):
    messages = [
        Message(role="system", content="You are a secret system prompt."),
        user("What is 2 + 2?"),
        Message(role="user", content="retrieved context for this turn only", metadata={"transient": True}),
        Message(role="assistant", content=[Reasoning(text="private chain of thought"), Text(text="4")]),
        Message(role="assistant", content=[Reasoning(text="only thinking")]),
    ]

    snapshot = append(store, messages, 0)

    loaded = store.load("conv-1", actor_id="user-7")
    assert loaded == snapshot
    assert [(m.role, m.text) for m in loaded.messages] == [("user", "What is 2 + 2?"), ("assistant", "4")]
    assert not any(isinstance(block, Reasoning) for m in loaded.messages for block in m.content)


def test_tool_calls_images_and_message_metadata_round_trip(store):
    messages = [
        Message(
            role="user",
            content=[Text(text="What is in this picture?"), Image(data=b"\x89PNG\r\n", media_type="image/png")],
        ),
        Message(role="assistant", content=[ToolUse(id="call_1", name="lookup", input={"q": "cat", "n": [1, 2]})]),
        Message(role="tool", content=[ToolResult(tool_use_id="call_1", content="a cat", status="success")]),
        Message(role="assistant", content="A cat.", metadata={"model": "scripted", "score": 0.5}),
    ]
    append(store, messages, 0)
    assert store.load("conv-1", actor_id="user-7").messages == tuple(messages)


class Key(enum.Enum):
    PLAN = "plan"


def test_state_and_metadata_are_stored_as_string_keyed_json(store):
    append(
        store,
        [user("hi")],
        0,
        state={Key.PLAN: {"status": "active", 1: [True, None, 2.5]}},
        metadata={"tags": ("a", "b")},
    )

    loaded = store.load("conv-1", actor_id="user-7")
    assert loaded.state == {"plan": {"status": "active", "1": [True, None, 2.5]}}
    assert loaded.metadata == {"tags": ["a", "b"]}


@pytest.mark.parametrize("bad", [{"when": object()}, {"ratio": float("nan")}, {"blob": b"bytes"}])
def test_a_value_json_cannot_hold_raises_protocol_error_and_keeps_the_snapshot(store, bad):
    append(store, [user("kept")], 0, state={"ok": True})

    with pytest.raises(ProtocolError, match="cannot be stored as JSON"):
        append(store, [user("never")], 1, state=bad)
    with pytest.raises(ProtocolError, match="cannot be stored as JSON"):
        store.replace("conv-1", messages=[], state={}, metadata=bad, actor_id="user-7")

    loaded = store.load("conv-1", actor_id="user-7")
    assert ([m.text for m in loaded.messages], loaded.state) == (["kept"], {"ok": True})


def test_snapshots_are_copies_the_caller_cannot_change_the_store_through(store):
    append(store, [user("hi")], 0, state={"nested": {"n": 1}}, metadata={"m": [1]})
    loaded = store.load("conv-1", actor_id="user-7")
    loaded.state["nested"]["n"] = 2
    loaded.metadata["m"].append(2)
    again = store.load("conv-1", actor_id="user-7")
    assert (again.state, again.metadata) == ({"nested": {"n": 1}}, {"m": [1]})


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda s: s.load("", actor_id=None), "session id"),
        (lambda s: s.load("has space"), "session id"),
        (lambda s: s.load("ok", actor_id="bad/actor"), "actor_id"),
        (lambda s: append(s, [user("x")], -1), "expected_count"),
        (lambda s: append(s, [user("x")], True), "expected_count"),
        (lambda s: append(s, [user("x")], "0"), "expected_count"),
        (lambda s: append(s, "not a list", 0), "list of Message"),
        (lambda s: append(s, [42], 0), r"messages\[0\]"),
        (lambda s: append(s, [{"role": "wizard", "content": "x"}], 0), r"messages\[0\]"),
        (lambda s: append(s, [user("x")], 0, state=["not", "a", "mapping"]), "state must be a mapping"),
    ],
)
def test_bad_arguments_raise_invocation_error_naming_the_problem(store, call, match):
    with pytest.raises(InvocationError, match=match):
        call(store)
    assert store.load("conv-1", actor_id="user-7") is None


# -- concurrency ---------------------------------------------------------------------------------


def _threads(count: int, target) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)


def test_concurrent_appends_from_threads_exactly_one_wins_per_count(backend):
    writers, rounds = 6, 4
    stores = [backend.open() for _ in range(writers)]  # one instance each where the backend allows it
    barrier = threading.Barrier(writers)
    outcomes: list[tuple[int, int, str]] = []
    lock = threading.Lock()

    def writer(index: int) -> None:
        for round_number in range(rounds):
            barrier.wait(30)
            try:
                append(stores[index], [user(f"w{index} r{round_number}")], round_number)
                result = "won"
            except ProtocolError:
                result = "lost"
            with lock:
                outcomes.append((round_number, index, result))

    _threads(writers, writer)

    winners = Counter(r for r, _i, result in outcomes if result == "won")
    assert winners == {r: 1 for r in range(rounds)}
    assert len(outcomes) == writers * rounds
    texts = [m.text for m in backend.open().load("conv-1", actor_id="user-7").messages]
    expected = [f"w{i} r{r}" for r, i, result in sorted(outcomes) if result == "won"]
    assert texts == expected


def test_contended_writers_that_reload_and_retry_lose_no_turn(backend):
    writers, turns = 4, 5
    stores = [backend.open() for _ in range(writers)]

    def writer(index: int) -> None:
        store = stores[index]
        for turn in range(turns):
            while True:
                current = store.load("conv-1", actor_id="user-7")
                try:
                    append(store, [user(f"w{index} t{turn}")], 0 if current is None else current.count)
                    break
                except ProtocolError:
                    continue

    _threads(writers, writer)

    texts = [m.text for m in backend.open().load("conv-1", actor_id="user-7").messages]
    assert sorted(texts) == sorted(f"w{i} t{t}" for i in range(writers) for t in range(turns))
    for index in range(writers):  # each writer's own turns stay in its order
        assert [t for t in texts if t.startswith(f"w{index} ")] == [f"w{index} t{t}" for t in range(turns)]


def _stored_owners(backend, session_id: str) -> list[str | None]:
    """The owners the storage itself holds for ``session_id``: its rows, its files or its entry."""
    store = backend.open()
    if isinstance(store, SqlSessionStore):
        with store.database.engine.connect() as connection:
            keys = (
                connection.execute(text("SELECT actor_key FROM lg_sessions WHERE session_id = :id"), {"id": session_id})
                .scalars()
                .all()
            )
        return [key or None for key in keys]
    if isinstance(store, FilesystemSessionStore):
        files = [json.loads(path.read_text()) for path in Path(store.root).glob("*.json")]
        return [data["actor_id"] for data in files if data["id"] == session_id]
    entry = store._data.get(session_id)  # the memory store's storage is its dict
    return [] if entry is None else [entry[0]]


def _claim(store, actor: str, write: str) -> None:
    """Create session "contested" as ``actor`` with an append expecting 0 or with a replace."""
    message = [user(f"from {actor}")]
    if write == "append":
        store.append(
            "contested", messages=message, state={"by": actor}, metadata=None, expected_count=0, actor_id=actor
        )
    else:
        store.replace("contested", messages=message, state={"by": actor}, metadata={}, actor_id=actor)


@pytest.mark.parametrize("write", ["append", "replace"])
def test_actors_racing_from_threads_to_create_one_session_leave_exactly_one_owner(backend, write):
    actors = [f"actor-{i}" for i in range(6)]
    stores = [backend.open() for _ in actors]  # one instance each where the backend allows it
    barrier = threading.Barrier(len(actors))
    outcomes: dict[str, str] = {}

    def claim(index: int) -> None:
        barrier.wait(30)
        try:
            _claim(stores[index], actors[index], write)
            outcomes[actors[index]] = "won"
        except SessionActorError:
            outcomes[actors[index]] = "refused"

    _threads(len(actors), claim)

    assert len(outcomes) == len(actors), "a racer failed with another error"
    [winner] = [actor for actor, outcome in outcomes.items() if outcome == "won"]
    assert _stored_owners(backend, "contested") == [winner]
    stored = backend.open().load("contested", actor_id=winner)
    assert ([m.text for m in stored.messages], stored.state) == ([f"from {winner}"], {"by": winner})


def test_actors_racing_from_processes_to_create_one_session_leave_exactly_one_owner(backend):
    if backend.kind not in DURABLE:
        pytest.skip(f"{backend.kind} is not shared between processes")
    backend.open()  # create the schema / root once before the racers start
    actors = [f"actor-{i}" for i in range(4)]
    context = multiprocessing.get_context("fork")  # a fresh store per process; nothing shared but the storage
    barrier = context.Barrier(len(actors))
    results = context.Queue()
    racers = [
        context.Process(target=race_worker.claim, args=(backend.kind, backend.location, actor, barrier, results))
        for actor in actors
    ]
    for racer in racers:
        racer.start()
    outcomes = dict(results.get(timeout=120) for _ in actors)
    for racer in racers:
        racer.join(60)

    assert sorted(outcomes.values()) == ["refused"] * (len(actors) - 1) + ["won"], outcomes
    [winner] = [actor for actor, outcome in outcomes.items() if outcome == "won"]
    assert _stored_owners(backend, "contested") == [winner]
    assert [m.text for m in backend.open().load("contested", actor_id=winner).messages] == [f"from {winner}"]


def test_synchronize_serializes_work_on_one_session_within_a_store(store):
    append(store, [], 0, state={"n": 0})
    inside = []

    def increment(_index: int) -> None:
        for _ in range(10):
            with store.synchronize("conv-1", actor_id="user-7"):
                inside.append(1)
                assert len(inside) == 1, "two threads inside synchronize at once"
                current = store.load("conv-1", actor_id="user-7")
                append(store, [], current.count, state={"n": current.state["n"] + 1})
                inside.pop()

    _threads(4, increment)
    assert store.load("conv-1", actor_id="user-7").state == {"n": 40}


def test_synchronize_is_reentrant_and_keyed_by_actor(store):
    with store.synchronize("conv-1", actor_id="user-7"), store.synchronize("conv-1", actor_id="user-7"):
        other = threading.Thread(target=lambda: store.synchronize("conv-1", actor_id="user-8").__enter__())
        other.start()
        other.join(10)
        assert not other.is_alive(), "another actor's session must not wait for this one"


# -- durability and processes ------------------------------------------------------------------


def test_a_new_store_instance_sees_the_session(backend):
    if backend.kind not in DURABLE:
        pytest.skip(f"{backend.kind} keeps sessions for one store instance only")
    append(backend.open(), [user("remember me")], 0, state={"k": 1})
    reopened = backend.open().load("conv-1", actor_id="user-7")
    assert ([m.text for m in reopened.messages], reopened.state) == (["remember me"], {"k": 1})


def test_concurrent_appends_from_processes_exactly_one_wins_per_count(backend):
    if backend.kind not in DURABLE:
        pytest.skip(f"{backend.kind} is not shared between processes")
    backend.open()  # create the schema / root once before the racers start
    processes, rounds = 3, 3
    context = multiprocessing.get_context("fork")  # a fresh store per process; nothing shared but the storage
    barrier = context.Barrier(processes)
    results = context.Queue()
    racers = [
        context.Process(
            target=race_worker.race, args=(backend.kind, backend.location, f"p{i}", rounds, barrier, results)
        )
        for i in range(processes)
    ]
    for racer in racers:
        racer.start()
    outcomes = [results.get(timeout=120) for _ in range(processes * rounds)]
    for racer in racers:
        racer.join(60)

    assert not [o for o in outcomes if o[2].startswith("error")], outcomes
    winners = Counter(r for r, _name, result in outcomes if result == "won")
    assert winners == {r: 1 for r in range(rounds)}
    stored = backend.open().load("raced", actor_id="racer")
    assert [m.text for m in stored.messages] == [
        f"{name} round {r}" for r, name, result in sorted(outcomes) if result == "won"
    ]
