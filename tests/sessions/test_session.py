"""Session (the application's handle on one conversation), store construction from
configuration, and the filesystem store's own rules."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import threading

import pytest

import lg_core
from lg_core import (
    AbstractMethodError,
    Configuration,
    ConfigurationError,
    InvocationError,
    Message,
    ProtocolError,
    Reasoning,
    SessionActorError,
    Text,
    configure,
)
from lg_core.session import Session
from lg_core.sessions import (
    FilesystemSessionStore,
    MemorySessionStore,
    SessionSnapshot,
    SessionStore,
    SqlSessionStore,
    build_session_store,
    persistable,
)
from lg_core.sessions.filesystem import UnusableRootError
from lg_core.store import RunStore


def user(text: str) -> Message:
    return Message(role="user", content=text)


def assistant(text: str) -> Message:
    return Message(role="assistant", content=text)


class CountingStore(MemorySessionStore):
    """A real memory store that counts how often it is read."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    def load(self, id, actor_id=None):
        self.loads += 1
        return super().load(id, actor_id=actor_id)


# -- Session -------------------------------------------------------------------------------------


def test_the_spec_example_append_then_reopen():
    session = Session("conversation-42", actor_id="user-7", store=MemorySessionStore())
    session.append([Message(role="user", content="Hello")], state={"language": "en"})

    reopened = Session("conversation-42", actor_id="user-7", store=session.store)
    assert reopened.history()[-1].text == "Hello"
    assert reopened.state["language"] == "en"


def test_no_store_access_until_the_session_is_read_and_then_only_once():
    store = CountingStore()
    session = Session("c", store=store)
    assert store.loads == 0
    session.history()
    _ = session.state, session.metadata
    session.load()
    assert store.loads == 1


def test_history_uses_the_stored_messages_or_the_fallback_for_a_new_session():
    store = MemorySessionStore()
    fallback = [user("earlier, elsewhere")]
    assert [m.text for m in Session("c", store=store).history(fallback)] == ["earlier, elsewhere"]

    Session("c", store=store).append([user("stored")])
    assert [m.text for m in Session("c", store=store).history(fallback)] == ["stored"]


@pytest.mark.parametrize("fallback", ["abc", {"role": "user", "content": "hi"}, user("one message"), 5])
def test_history_refuses_a_fallback_that_is_not_a_list_of_messages(fallback):
    """A string was taken one message per character."""
    with pytest.raises(TypeError, match=r"history\(fallback=...\) takes a list of messages, got "):
        Session("c", store=MemorySessionStore()).history(fallback)


def test_state_is_a_mutable_copy_that_append_persists():
    store = MemorySessionStore()
    Session("c", store=store).append([user("hi")], state={"plan": {"status": "trial"}})
    session = Session("c", store=store)

    state = session.state
    state["plan"]["status"] = "active"
    assert session.state.dig("plan", "status") == "trial"  # a copy
    session.append([assistant("upgraded")], state=state)
    assert Session("c", store=store).state.dig("plan", "status") == "active"


def test_metadata_is_read_only_and_defaults_to_the_construction_metadata():
    store = MemorySessionStore()
    session = Session("c", store=store, metadata={"channel": "web"})
    assert dict(session.metadata) == {"channel": "web"}
    with pytest.raises(TypeError):
        session.metadata["channel"] = "app"  # type: ignore[index]
    session.append([user("hi")])
    assert store.load("c").metadata == {"channel": "web"}
    assert dict(Session("c", store=store, metadata={"ignored": True}).metadata) == {"channel": "web"}


def test_append_expects_the_history_this_session_loaded():
    store = MemorySessionStore()
    mine, theirs = Session("c", store=store), Session("c", store=store)
    mine.history()
    theirs.append([user("theirs first")])

    with pytest.raises(ProtocolError, match="another writer changed it first"):
        mine.append([user("mine, from a stale view")])
    assert [m.text for m in store.load("c").messages] == ["theirs first"]


def test_checkpoint_appends_an_extended_conversation_and_replaces_a_rewritten_one():
    store = MemorySessionStore()
    session = Session("c", store=store)
    session.checkpoint([user("one"), assistant("two")])
    session.checkpoint([user("one"), assistant("two"), user("three")], state={"n": 3})
    assert [m.text for m in store.load("c").messages] == ["one", "two", "three"]

    Session("c", store=store).checkpoint([user("a summary of it all")])
    assert [m.text for m in store.load("c").messages] == ["a summary of it all"]


def test_checkpoint_result_saves_a_finished_runs_conversation_and_state(config, script):
    class Greeter(lg_core.Agent):
        model = script([{"text": "Hello there."}])

    run = Greeter.ask("Hi", context={"tier": "gold"})
    session = Session("saved-by-hand", store=MemorySessionStore())
    session.checkpoint_result(run)
    assert [m.text for m in session.history()] == ["Hi", "Hello there."]
    assert session.state["tier"] == "gold"
    with pytest.raises(InvocationError, match="completed Run"):
        session.checkpoint_result(object())


def test_a_session_without_a_store_uses_the_current_runtimes(config):
    Session("ambient", actor_id="user-1").append([user("kept in the run store's database")])
    assert isinstance(config.runtime().session_store, SqlSessionStore)
    assert config.runtime().session_store.load("ambient", actor_id="user-1").count == 1


@pytest.mark.parametrize(
    "options, match",
    [
        ({"id": "bad id"}, "session id"),
        ({"id": "ok", "actor_id": ""}, "actor_id"),
        ({"id": "ok", "store": {"not": "a store"}}, "store must be a SessionStore"),
        ({"id": "ok", "metadata": "text"}, "metadata must be a mapping"),
    ],
)
def test_bad_session_arguments_raise_invocation_error(options, match):
    with pytest.raises(InvocationError, match=match):
        Session(**options)


def test_persistable_is_the_one_sanitizing_rule():
    kept = persistable(
        [
            Message(role="system", content="system"),
            Message(role="user", content="transient", metadata={"transient": True}),
            Message(role="assistant", content=[Reasoning(text="thinking"), Text(text="answer")]),
            {"role": "user", "content": "a mapping is read as a message"},
        ]
    )
    assert [(m.role, m.text) for m in kept] == [("assistant", "answer"), ("user", "a mapping is read as a message")]


def test_a_subclass_that_implements_nothing_raises_abstract_method_error():
    class Unfinished(SessionStore):
        pass

    store = Unfinished()
    with pytest.raises(AbstractMethodError, match="must implement load"):
        store.load("c")
    with pytest.raises(AbstractMethodError, match="append"):
        store.append("c", messages=[], state={}, metadata={}, expected_count=0)
    with pytest.raises(AbstractMethodError, match="replace"):
        store.replace("c", messages=[], state={}, metadata={})
    assert store.project_conversation("c", messages=[], metadata={}) is None
    with store.synchronize("c"):
        pass


def test_snapshot_count_is_its_message_count():
    assert SessionSnapshot((user("a"), user("b"))).count == 2


# -- configuration -------------------------------------------------------------------------------


@pytest.fixture
def run_store():
    store = RunStore("sqlite://")
    yield store
    store.close()


def test_the_default_store_shares_the_run_stores_database(run_store):
    store, owned = build_session_store("sql", run_store)
    assert isinstance(store, SqlSessionStore) and store.database is run_store.db and owned


def test_a_sql_declaration_with_the_run_store_url_shares_its_database(run_store):
    store, _owned = build_session_store({"provider": "sql", "url": run_store.url}, run_store)
    assert store.database is run_store.db


def test_a_sql_store_in_its_own_database_opens_a_pool_as_large_as_the_run_stores(pg_url):
    # store_pool_size bounds the connections a process opens: a session store in another
    # PostgreSQL database must not add a pool of the default size beside a smaller one.
    run_store = RunStore("sqlite://", pool_size=4)
    sized, _owned = build_session_store({"provider": "sql", "url": pg_url}, run_store)
    chosen, _owned = build_session_store({"provider": "sql", "url": pg_url, "pool_size": 2}, run_store)
    try:
        assert sized.database.engine.pool.size() == 4
        assert chosen.database.engine.pool.size() == 2  # the declaration's own pool_size wins
    finally:
        sized.close(), chosen.close(), run_store.close()


@pytest.mark.parametrize(
    "declaration, kind",
    [
        ("memory", MemorySessionStore),
        ("none", type(None)),
        (None, type(None)),
        (MemorySessionStore, MemorySessionStore),
        ({"provider": MemorySessionStore}, MemorySessionStore),
        ('{"provider": "memory"}', MemorySessionStore),
    ],
)
def test_declarations_build_their_store(run_store, declaration, kind):
    assert isinstance(build_session_store(declaration, run_store)[0], kind)


def test_a_filesystem_declaration_builds_a_store_at_its_root(run_store, tmp_path):
    store, owned = build_session_store({"provider": "filesystem", "root": str(tmp_path / "s")}, run_store)
    assert isinstance(store, FilesystemSessionStore) and owned


def test_an_instance_is_used_as_is_and_stays_the_applications(run_store):
    mine = MemorySessionStore()
    assert build_session_store(mine, run_store) == (mine, False)


@pytest.mark.parametrize(
    "value, match",
    [
        (42, "got int"),
        ("redis", "must be one of"),
        ({"root": "/tmp"}, "provider"),
        ({"provider": dict}, "provider"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_declarations_are_configuration_errors(value, match):
    with pytest.raises(ConfigurationError, match=match):
        lg_core.config.build_configuration(session_store=value)
    with lg_core.with_configuration(Configuration()):
        with pytest.raises(ConfigurationError, match=match):
            configure(session_store=value)


def test_provider_options_that_do_not_fit_are_configuration_errors(run_store):
    with pytest.raises(ConfigurationError, match="do not fit MemorySessionStore"):
        build_session_store({"provider": "memory", "root": "/tmp"}, run_store)


def test_the_environment_can_declare_the_store(monkeypatch, tmp_path):
    monkeypatch.setenv("LG_SESSION_STORE", f'{{"provider": "filesystem", "root": "{tmp_path / "env"}"}}')
    configuration = Configuration()
    try:
        assert isinstance(configuration.runtime().session_store, FilesystemSessionStore)
    finally:
        configuration.close()


# -- the filesystem store's own rules ------------------------------------------------------------


def test_the_filesystem_root_is_created_private(tmp_path):
    FilesystemSessionStore(tmp_path / "new" / "root")
    assert stat.S_IMODE(os.stat(tmp_path / "new" / "root").st_mode) == 0o700


def test_a_shared_or_symlinked_root_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    with pytest.raises(ConfigurationError, match="chmod 700"):
        FilesystemSessionStore(shared)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(private)
    with pytest.raises(ConfigurationError, match="symbolic link"):
        FilesystemSessionStore(tmp_path / "link")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError):
        FilesystemSessionStore(tmp_path / "file")


def test_an_unusable_filesystem_root_is_the_specs_argument_error(tmp_path):
    """Spec SessionStores::Filesystem.new: 'Raises ArgumentError when the root does not meet
    those requirements' (ValueError in Python): code ported with ``except ValueError`` let
    the ConfigurationError through."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    (tmp_path / "link").symlink_to(tmp_path / "private")
    (tmp_path / "file").write_text("x")
    for root in (shared, tmp_path / "link", tmp_path / "file"):
        with pytest.raises(ValueError, match="session store root") as raised:
            FilesystemSessionStore(root)
        assert isinstance(raised.value, ConfigurationError)


def test_filesystem_file_names_do_not_contain_ids_and_a_corrupt_file_is_a_protocol_error(tmp_path):
    store = FilesystemSessionStore(tmp_path / "s")
    store.append("conv..secret", messages=[user("hi")], state={}, metadata={}, expected_count=0, actor_id="user-7")
    [snapshot_file] = [p for p in (tmp_path / "s").iterdir() if p.suffix == ".json"]
    assert "conv" not in snapshot_file.name and "user-7" not in snapshot_file.name

    snapshot_file.write_text("{not json")
    with pytest.raises(ProtocolError, match="not a valid snapshot"):
        store.load("conv..secret", actor_id="user-7")


def _earlier_layout_file(root, session_id: str, actor_id: str | None, text: str):
    """A session file as versions before session owners wrote it: named by the digest of (actor, id)."""
    name = hashlib.sha256(f"{actor_id or ''}\x00{session_id}".encode()).hexdigest() + ".json"
    data = {
        "v": 1,
        "id": session_id,
        "actor_id": actor_id,
        "messages": [user(text).to_dict()],
        "state": {"by": text},
        "metadata": {},
    }
    (root / name).write_text(json.dumps(data))
    return root / name


def test_a_root_of_the_earlier_per_actor_layout_is_renamed_once_and_its_sessions_keep_their_actor(tmp_path):
    root = tmp_path / "s"
    root.mkdir(mode=0o700)
    earlier = [
        _earlier_layout_file(root, "conv-1", "user-7", "seven"),
        _earlier_layout_file(root, "conv-2", None, "nobody"),
    ]
    opened = []
    threads = [threading.Thread(target=lambda: opened.append(FilesystemSessionStore(root))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert len(opened) == 4  # every opener, racing the upgrade, opened the store
    store = opened[0]
    assert not any(path.exists() for path in earlier)
    assert sorted(p.name for p in root.glob("*.json")) == sorted(
        hashlib.sha256(session_id.encode()).hexdigest() + ".json" for session_id in ("conv-1", "conv-2")
    )
    assert json.loads((root / ".layout").read_text()) == {"layout": 2}
    assert store.load("conv-1", actor_id="user-7").state == {"by": "seven"}
    assert [m.text for m in store.load("conv-2").messages] == ["nobody"]
    with pytest.raises(SessionActorError):  # the id stays its actor's: no one else claims it after the upgrade
        store.append("conv-1", messages=[user("mine")], state={}, metadata={}, expected_count=0, actor_id="user-8")


def test_a_root_where_one_session_id_has_several_actors_is_refused_until_one_is_moved_out(tmp_path):
    root = tmp_path / "s"
    root.mkdir(mode=0o700)
    seven = _earlier_layout_file(root, "conv-1", "user-7", "seven")
    eight = _earlier_layout_file(root, "conv-1", "user-8", "eight")

    with pytest.raises(UnusableRootError, match="several actors") as refused:
        FilesystemSessionStore(root)
    assert seven.name in str(refused.value) and eight.name in str(refused.value)
    assert seven.exists() and eight.exists() and not (root / ".layout").exists()

    eight.rename(tmp_path / eight.name)  # the application keeps user-7's conversation under the id
    store = FilesystemSessionStore(root)
    assert store.load("conv-1", actor_id="user-7").state == {"by": "seven"}
    with pytest.raises(SessionActorError):
        store.load("conv-1", actor_id="user-8")


# -- a custom store written as the spec's example is ----------------------------------------------


class MappingStore(SessionStore):
    """A store shaped like the spec's DatabaseSessionStore example: ``load`` returns the
    row's snapshot as a plain mapping, and ``append``/``replace`` return nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict = {}

    def load(self, id, actor_id=None):
        return self.rows.get((id, actor_id))

    def append(self, id, *, messages, state, metadata, expected_count, actor_id=None):
        row = self.rows.get((id, actor_id)) or {"messages": [], "state": {}, "metadata": {}}
        if len(row["messages"]) != expected_count:
            raise ProtocolError(f"expected {expected_count} messages, found {len(row['messages'])}")
        self.replace(
            id,
            messages=[*row["messages"], *self.kept(messages)],
            state=state,
            metadata=metadata,
            actor_id=actor_id,
            kept=True,
        )

    def replace(self, id, *, messages, state, metadata, actor_id=None, kept=False):
        messages = messages if kept else self.kept(messages)
        self.rows[(id, actor_id)] = {
            "messages": list(messages),
            "state": self.saved(state),
            "metadata": self.saved(metadata),
        }

    def kept(self, messages):
        return [m.to_dict() for m in persistable(messages)]

    def saved(self, mapping):
        return dict(mapping)


def test_a_store_returning_mapping_snapshots_and_no_write_result_works_with_session():
    store = MappingStore()
    session = Session("c", actor_id="user-7", store=store)
    session.append([user("one")], state={"n": 1}, metadata={"channel": "web"})
    session.append([assistant("two")])  # expects the count its own last write left
    session.checkpoint([user("one"), assistant("two"), user("three")])

    reopened = Session("c", actor_id="user-7", store=store)
    assert [m.text for m in reopened.history()] == ["one", "two", "three"]
    assert reopened.state["n"] == 1
    assert dict(reopened.metadata) == {"channel": "web"}
    assert isinstance(reopened.load(), SessionSnapshot)


class VerbatimStore(MappingStore):
    """The spec's DatabaseSessionStore, saving exactly what it is handed (no sanitizing of its own)."""

    def kept(self, messages):
        return list(messages)

    def saved(self, mapping):
        return mapping


def test_session_hands_an_application_store_only_what_may_be_persisted():
    """Spec Session: 'System messages, transient messages, and private model reasoning are
    removed before persistence', and SessionStore: state and metadata 'cross this boundary
    as deeply string-keyed JSON mappings'. Session passed them to the store as given: a store
    written as the spec's example saved the system prompt and reasoning, and its next
    append failed with a count mismatch (the Session expected the sanitized count)."""
    store = VerbatimStore()
    session = Session("c", actor_id="user-7", store=store)
    session.append(
        [
            Message(role="system", content="secret prompt"),
            user("hi"),
            Message(role="user", content="scratch", metadata={"transient": True}),
        ],
        state={"counts": {1: "one"}},
        metadata={"channel": "web"},
    )
    row = store.rows[("c", "user-7")]
    assert [(m.role, m.text) for m in row["messages"]] == [("user", "hi")]
    assert row["state"] == {"counts": {"1": "one"}} and type(row["state"]) is dict
    assert row["metadata"] == {"channel": "web"} and type(row["metadata"]) is dict

    session.append([assistant("hello")])  # expects the count the store really holds
    assert [m.text for m in store.rows[("c", "user-7")]["messages"]] == ["hi", "hello"]

    session.replace([Message(role="assistant", content=[Reasoning(text="private"), Text(text="visible")])])
    [kept] = store.rows[("c", "user-7")]["messages"]
    assert [type(block) for block in kept.content] == [Text]


def test_a_store_returning_something_that_is_no_snapshot_is_a_protocol_error():
    class Odd(MappingStore):
        def load(self, id, actor_id=None):
            return ["not", "a", "snapshot"]

    with pytest.raises(ProtocolError, match="Odd returned list"):
        Session("c", store=Odd()).history()


def test_a_filesystem_snapshot_that_cannot_be_written_is_a_protocol_error(tmp_path, monkeypatch):
    # The spec: "Raises ProtocolError when ... the snapshot cannot be read or written."
    store = FilesystemSessionStore(tmp_path / "s")
    store.replace("c", messages=[user("kept")], state={}, metadata={}, actor_id="user-7")
    path = store._path(("c", "user-7"))
    blocked = store._path(("blocked", "user-7"))
    blocked.mkdir()  # the snapshot's file name is taken by a directory: not even its owner can be read
    with pytest.raises(ProtocolError, match="cannot read session file"):
        store.replace("blocked", messages=[user("hi")], state={}, metadata={}, actor_id="user-7")

    def disk_full(source, target):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(os, "replace", disk_full)  # the rename into place fails
        with pytest.raises(ProtocolError, match="cannot write session file"):
            store.replace("c", messages=[user("lost")], state={}, metadata={}, actor_id="user-7")
    assert [p.name for p in (tmp_path / "s").iterdir() if p.name.startswith(".tmp-")] == []
    assert [m.text for m in store.load("c", actor_id="user-7").messages] == ["kept"]

    path.with_suffix(".lock").unlink()
    path.with_suffix(".lock").mkdir()  # its lock file cannot be opened
    with pytest.raises(ProtocolError, match="cannot lock session file"):
        store.append("c", messages=[user("more")], state={}, metadata={}, expected_count=1, actor_id="user-7")


class TracingStore(MemorySessionStore):
    """Records the telemetry operation each store call ran under (SessionStore#with_operation_context)."""

    def __init__(self) -> None:
        super().__init__()
        self.current: list = []
        self.calls: list = []

    @contextlib.contextmanager
    def with_operation_context(self, operation_id):
        self.current.append(operation_id)
        try:
            yield
        finally:
            self.current.pop()

    def load(self, id, actor_id=None):
        self.calls.append(("load", self.current[-1] if self.current else "none"))
        return super().load(id, actor_id=actor_id)

    def append(self, id, **options):
        self.calls.append(("append", self.current[-1] if self.current else "none"))
        return super().append(id, **options)

    def replace(self, id, **options):
        self.calls.append(("replace", self.current[-1] if self.current else "none"))
        return super().replace(id, **options)


def test_session_store_calls_run_in_the_sessions_operation_context():
    store = TracingStore()
    session = Session("c", store=store, operation_id="op-1")
    session.append([user("one")])
    session.checkpoint([user("one"), assistant("two")], parent_operation_id="op-2")
    session.checkpoint([user("rewritten")])
    assert store.calls == [("load", "op-1"), ("append", "op-1"), ("append", "op-2"), ("replace", "op-1")]


def test_the_default_operation_context_keeps_the_blocks_value():
    store = MemorySessionStore()
    with store.with_operation_context("op-1"):
        value = "kept"
    with store.with_operation_context(None):
        pass
    assert value == "kept"


def test_metadata_is_frozen_all_the_way_down():
    # The spec: "The returned DataMap is frozen." A nested value changed through it
    # must not leak into the session (and from there into its next write).
    store = MemorySessionStore()
    session = Session("c", store=store, metadata={"tags": {"tier": "gold"}, "labels": ["a"]})
    metadata = session.metadata
    with pytest.raises(TypeError):
        metadata["tags"]["tier"] = "free"
    with pytest.raises((TypeError, AttributeError)):
        metadata["labels"].append("b")
    session.append([user("hi")])
    assert store.load("c").metadata == {"tags": {"tier": "gold"}, "labels": ["a"]}
    assert session.metadata["tags"]["tier"] == "gold" and list(session.metadata["labels"]) == ["a"]


def test_a_filesystem_snapshot_that_is_a_link_or_no_regular_file_is_unsafe(tmp_path):
    # The spec: load raises "ProtocolError for an invalid or unsafe persisted snapshot".
    store = FilesystemSessionStore(tmp_path / "s")
    store.replace("c", messages=[user("mine")], state={}, metadata={}, actor_id="user-7")
    path = store._path(("c", "user-7"))
    planted = tmp_path / "planted.json"
    planted.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(planted)  # a valid-looking snapshot from outside the private root
    with pytest.raises(ProtocolError, match="not a regular file"):
        store.load("c", actor_id="user-7")

    path.unlink()
    os.mkfifo(path)  # reading it would block forever
    with pytest.raises(ProtocolError, match="not a regular file"):
        store.load("c", actor_id="user-7")
