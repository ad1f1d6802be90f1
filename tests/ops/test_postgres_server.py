"""PostgresServer's fsync setting: off for the test suite, on for the benchmark and ``lg stack``."""

from __future__ import annotations

import threading

import psycopg
import pytest

from lg_scheduler.stack.servers import PostgresServer


def _fsync(argv: list[str]) -> str:
    return next(arg for arg in argv if arg.startswith("fsync="))


def test_fsync_is_off_unless_asked_for(tmp_path):
    assert _fsync(PostgresServer(root=tmp_path / "a").command()) == "fsync=off"
    durable = PostgresServer(root=tmp_path / "b", fsync=True)
    assert _fsync(durable.command()) == "fsync=on"
    # ``lg stack`` passes durable=True explicitly; an explicit value wins over the constructor's.
    assert _fsync(PostgresServer(root=tmp_path / "c").command(durable=True)) == "fsync=on"
    assert _fsync(durable.command(durable=False)) == "fsync=off"


def test_fsync_must_be_a_bool(tmp_path):
    with pytest.raises(TypeError, match="fsync must be True or False"):
        PostgresServer(root=tmp_path, fsync="on")  # type: ignore[arg-type]


def test_a_server_that_logs_more_than_a_pipe_holds_keeps_answering():
    """Its log went to a pipe nobody read once it was up: past 64 KiB of ERROR lines (a commit that
    loses a race logs one, with its statement) a backend blocked in write() holding its row locks,
    and every transaction behind it waited for good (a turn of 60 parallel tool calls hung the suite)."""
    server = PostgresServer().start()  # its own directory, which the postgres user can own
    padding = "x" * 1000

    def fail_often() -> None:
        with psycopg.connect(server.url().replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
            for _ in range(200):  # about 250 KiB of log
                with pytest.raises(psycopg.errors.DivisionByZero):
                    conn.execute(f"SELECT 1 / 0 -- {padding}")
            conn.execute("SELECT 1")

    try:
        worker = threading.Thread(target=fail_often, daemon=True)
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), "the server stopped answering: a backend is blocked writing its log"
        assert "division by zero" in server.log_path.read_text()
    finally:
        server.stop()


def test_the_readiness_probe_leaves_no_error_in_the_server_log():
    """pg_isready without a role connected as the OS user: `lg stack`'s postgres.log opened with
    ``FATAL: role "root" does not exist`` on every start, an error in the log a user watches."""
    server = PostgresServer().start()
    try:
        for _ in range(3):
            assert server.is_ready()
        assert "FATAL" not in server.log_path.read_text()
    finally:
        server.stop()
