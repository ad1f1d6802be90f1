"""The run store's schema is managed by Alembic migrations."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from lg_core import ConfigurationError
from lg_core.store import RunStore
from lg_core.store.migrate import HEAD_REVISION, VERSION_TABLE, head_revision
from lg_core.store.schema import metadata


@pytest.fixture
def url(durable_url) -> str:
    return durable_url


def _revision(url: str) -> str:
    engine = create_engine(url)
    with engine.connect() as connection:
        value = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    engine.dispose()
    assert isinstance(value, str), f"no migration revision recorded in {VERSION_TABLE}"
    return value


def test_a_new_store_is_created_at_the_latest_revision_and_reopens(url):
    RunStore(url).close()
    assert _revision(url) == head_revision()
    RunStore(url).close()  # nothing to do the second time
    assert _revision(url) == head_revision()


def test_the_head_revision_constant_names_the_newest_migration():
    """Adding a migration without updating HEAD_REVISION fails here (stores at the old head
    would skip the upgrade's lock and then run it through Alembic on every open)."""
    assert head_revision() == HEAD_REVISION


def test_opening_a_store_at_the_head_revision_does_not_load_alembic(url):
    RunStore(url).close()
    script = (
        "import sys; from lg_core.store import RunStore; RunStore(sys.argv[1]).close(); "
        "print(sorted(m for m in sys.modules if m == 'alembic' or m.startswith('alembic.')))"
    )
    opened = subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True, check=True)
    assert opened.stdout.strip() == "[]"


def test_the_migrations_describe_exactly_schema_py(url):
    """Changing schema.py without adding a revision fails here."""
    RunStore(url).close()
    engine = create_engine(url)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE, "compare_type": True})
        differences = [d for d in compare_metadata(context, metadata) if "lg_alembic_version" not in str(d)]
    engine.dispose()
    assert differences == []


def test_a_store_written_by_a_newer_version_is_refused(url):
    RunStore(url).close()
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = 'from-the-future'"))
    engine.dispose()
    with pytest.raises(ConfigurationError, match="newer LittleGhost"):
        RunStore(url)


def _open_together(url: str, openers: int = 4) -> list[BaseException]:
    """Open a store from ``openers`` threads at once; the errors they met."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(openers)

    def open_store() -> None:
        barrier.wait()
        try:
            RunStore(url).close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_concurrent_openers_of_a_new_store_all_succeed(url):
    assert _open_together(url) == []
    assert _revision(url) == head_revision()


def test_concurrent_openers_of_new_sqlite_files_never_find_them_locked(tmp_path):
    """Switching a new file to WAL meets the other openers' locks, and SQLite says "database is
    locked" at once instead of waiting: about one 4-way open in twelve failed so. Many rounds,
    so that a regression fails here nearly every time."""
    for round_ in range(25):
        url = f"sqlite:///{tmp_path / f'runs-{round_}.db'}"
        assert _open_together(url) == [], f"round {round_}"


def test_a_store_at_the_first_revision_is_upgraded_in_place(url):
    """A database written before interjection ids (revision 0001) keeps its rows and gains the column."""
    from alembic import command

    from lg_core.store.migrate import alembic_config

    engine = create_engine(url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0001")
        connection.execute(
            text(
                "INSERT INTO lg_interjections (run_id, seq, message, metadata, created_at) "
                "VALUES ('r1', 1, '{}', '{}', 0)"
            )
        )
    engine.dispose()

    RunStore(url).close()

    assert _revision(url) == head_revision()
    engine = create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT run_id, seq, interjection_id FROM lg_interjections")).all()
    engine.dispose()
    assert [tuple(row) for row in rows] == [("r1", 1, None)]


def test_a_store_before_relay_counts_is_upgraded_and_its_outbox_relayed(url):
    """Steps written before the relay's back-off (revision 0003) start at no sends, and the relay counts from there."""
    from alembic import command

    from lg_core.store.migrate import alembic_config

    engine = create_engine(url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0003")
        connection.execute(
            text(
                "INSERT INTO lg_runs (id, entrypoint, kind, status, invocation, session_id, cancel_requested, "
                "event_seq, interjections_pending, created_at, updated_at) "
                "VALUES ('r1', 'app:A', 'agent', 'running', '{}', 'r1', 0, 0, 0, 0, 0)"
            )
        )
        connection.execute(
            text(
                "INSERT INTO lg_steps (run_id, key, frame_id, kind, status, attempts, created_at, dispatch_after) "
                "VALUES ('r1', 'root/turn-0/model', 'r1/root', 'model', 'scheduled', 0, 0, 0)"
            )
        )
    engine.dispose()

    store = RunStore(url, relay_grace=10, relay_backoff_max=60)
    try:
        assert _revision(url) == head_revision()
        [relayed] = store.relay_due_steps()
        assert (relayed.step.key, relayed.missed, relayed.delay) == ("root/turn-0/model", 1, 10)
    finally:
        store.close()
    engine = create_engine(url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT relays FROM lg_steps")).scalar() == 1
    engine.dispose()


def test_tool_steps_an_older_version_claimed_keep_reporting_an_unknown_outcome(url):
    """Revision 0005 adds the mark that an at_most_once tool started. A tool step an older version
    claimed and that may run again cannot tell whether that claim reached the tool: it is marked,
    so its re-attempt still reports "outcome unknown", as it did before the upgrade."""
    from alembic import command

    from lg_core.store.migrate import alembic_config

    rows = [  # key, kind, status, attempts, started_at
        ("claimed", "tool", "running", 1, 5.0),
        ("retried", "tool", "scheduled", 1, 5.0),
        ("ended-with-its-run", "tool", "cancelled", 2, None),
        ("never-claimed", "tool", "scheduled", 0, None),
        ("done", "tool", "succeeded", 1, 5.0),
        ("a-model-turn", "model", "running", 1, 5.0),
    ]
    engine = create_engine(url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0003")
        for key, kind, status, attempts, started in rows:
            connection.execute(
                text(
                    "INSERT INTO lg_steps (run_id, key, frame_id, kind, status, attempts, created_at, started_at) "
                    "VALUES ('r1', :key, 'r1/root', :kind, :status, :attempts, 1.0, :started)"
                ),
                {"key": key, "kind": kind, "status": status, "attempts": attempts, "started": started},
            )
    engine.dispose()

    store = RunStore(url)
    marks = {step.key: step.body_entered_at for step in store.load_steps("r1")}
    store.close()

    assert marks == {
        "claimed": 5.0,
        "retried": 5.0,
        "ended-with-its-run": 1.0,
        "never-claimed": None,
        "done": None,
        "a-model-turn": None,
    }


def _sessions_at_0005(url: str, rows: list[tuple[str, str]]) -> None:
    """A store at revision 0005 holding one single-message session per ``(session_id, actor_key)``."""
    from alembic import command

    from lg_core import Message
    from lg_core.store.migrate import alembic_config
    from lg_core.store.records import dumps

    engine = create_engine(url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0005")
        for session_id, actor_key in rows:
            message = Message(role="user", content=actor_key or "nobody")
            params = {"id": session_id, "actor": actor_key, "data": dumps(message.to_dict())}
            connection.execute(
                text(
                    "INSERT INTO lg_sessions (session_id, actor_key, message_count, state, metadata, "
                    "created_at, updated_at) VALUES (:id, :actor, 1, '{}', '{}', 0, 0)"
                ),
                params,
            )
            connection.execute(
                text(
                    "INSERT INTO lg_session_messages (session_id, actor_key, seq, data) VALUES (:id, :actor, 0, :data)"
                ),
                params,
            )
    engine.dispose()


def _session_rows(url: str) -> list[tuple[str, str]]:
    engine = create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT session_id, actor_key FROM lg_sessions ORDER BY session_id, actor_key")
        ).all()
    engine.dispose()
    return [tuple(row) for row in rows]


def test_sessions_stored_before_owners_keep_their_actor_and_refuse_others(url):
    """Revision 0006 makes a session id belong to one actor; sessions of distinct ids upgrade as they are."""
    from lg_core import Message, SessionActorError
    from lg_core.sessions import SqlSessionStore

    _sessions_at_0005(url, [("conv-1", "user-7"), ("conv-2", "")])

    sessions = SqlSessionStore(url)
    try:
        assert _revision(url) == head_revision()
        assert [m.text for m in sessions.load("conv-1", actor_id="user-7").messages] == ["user-7"]
        assert [m.text for m in sessions.load("conv-2").messages] == ["nobody"]
        with pytest.raises(SessionActorError):
            sessions.load("conv-1", actor_id="user-8")
        with pytest.raises(SessionActorError):
            sessions.append(
                "conv-2",
                messages=[Message(role="user", content="mine?")],
                state={},
                metadata=None,
                expected_count=0,
                actor_id="user-8",
            )
    finally:
        sessions.close()
    assert _session_rows(url) == [("conv-1", "user-7"), ("conv-2", "")]
    engine = create_engine(url)
    indexes = {index["name"]: index for index in inspect(engine).get_indexes("lg_sessions")}
    engine.dispose()
    assert indexes["lg_sessions_owner"]["column_names"] == ["session_id"] and indexes["lg_sessions_owner"]["unique"]


def test_a_session_id_stored_under_several_actors_stops_the_upgrade_until_it_is_split(url):
    """The migration does not choose whose conversation keeps a shared id: it names the id and changes nothing."""
    _sessions_at_0005(url, [("conv-1", "user-7"), ("conv-1", "user-8"), ("conv-1", ""), ("conv-2", "user-7")])

    with pytest.raises(ConfigurationError, match=r"session ids 'conv-1' each hold the conversations of several actors"):
        RunStore(url)
    assert _revision(url) == "0005"
    assert len(_session_rows(url)) == 4

    engine = create_engine(url)
    with engine.begin() as connection:  # what the error says to do, for every actor but one
        for actor, new_id in (("user-8", "conv-1-user-8"), ("", "conv-1-nobody")):
            for table in ("lg_session_messages", "lg_sessions"):
                connection.execute(
                    text(f"UPDATE {table} SET session_id = :new WHERE session_id = 'conv-1' AND actor_key = :actor"),
                    {"new": new_id, "actor": actor},
                )
    engine.dispose()
    RunStore(url).close()
    assert _revision(url) == head_revision()
    assert _session_rows(url) == [
        ("conv-1", "user-7"),
        ("conv-1-nobody", ""),
        ("conv-1-user-8", "user-8"),
        ("conv-2", "user-7"),
    ]
