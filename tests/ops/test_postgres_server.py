"""PostgresServer's fsync setting: off for the test suite, on for the benchmark and ``lg stack``."""

from __future__ import annotations

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
