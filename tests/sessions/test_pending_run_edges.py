"""Runs waiting for their session (``pending``): cancel, deadline, a stuck predecessor, ids.

Each case was a bug: a cancel through a Run handle or racing the run's
activation was lost, a deadline did not end a waiting run (in this process or
through the scheduler), a wait behind a run left by a dead process was silent,
an id with a trailing newline passed validation, an undecodable session file
raised UnicodeDecodeError.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

import lg_core
from lg_core import Configuration, InvocationError, Message, ProtocolError, with_configuration
from lg_core.lease_holders import current_holder, hostname
from lg_core.sessions import FilesystemSessionStore, MemorySessionStore, SqlSessionStore
from lg_scheduler.scheduler import Scheduler
from tests.sessions import session_app
from tests.sessions.session_app import RecallAgent
from tests.sessions.test_session_runs import _gates, in_thread, wait_for  # noqa: F401

FIRST = "root/turn-0/model"


def test_cancelling_a_pending_run_through_its_run_handle_ends_it(config):
    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    second = RecallAgent.start_execution("second", session_id="conv-1", actor_id="user-7")
    assert second.state == "pending"

    lg_core.get_run(second.run_id).cancel("user hit stop")
    session_app.release("g1")

    assert first.wait(timeout=30).completed
    assert second.wait(timeout=30).cancelled


def test_a_cancel_racing_the_activation_of_a_pending_run_is_not_lost(config):
    rt = config.runtime()
    RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    second = RecallAgent.start_execution("gate:g2 second", session_id="conv-1", actor_id="user-7")
    original = rt.store.request_cancel

    def request_cancel_then_activation_happens(run_id):
        applied = original(run_id)  # False the first time: the run is still pending
        session_app.release("g1")  # ... and right now the earlier run finishes, activating it
        wait_for(lambda: rt.store.load_run(run_id).status != "pending")
        return applied

    rt.store.request_cancel = request_cancel_then_activation_happens
    live_run, rt.engine.live_run = rt.engine.live_run, lambda run_id: None  # as from another process
    try:
        assert lg_core.cancel_run(second.run_id) is True
    finally:
        rt.engine.live_run, rt.store.request_cancel = live_run, original
    session_app.release("g2")

    assert second.wait(timeout=30).cancelled


def test_a_deadline_ends_a_run_that_waits_for_its_session(config):
    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    results = {}
    asking = in_thread(
        lambda: results.setdefault(
            "run", RecallAgent.ask("second", session_id="conv-1", actor_id="user-7", deadline=0.3)
        )
    )
    asking.join(30)
    still_waiting = asking.is_alive()
    session_app.release("g1")
    asking.join(30)

    assert not still_waiting
    assert results["run"].outcome == "partial"
    assert first.wait(timeout=30).completed  # the session goes on without the ended run


class _Publisher:
    def __init__(self) -> None:
        self.published: list = []

    def publish(self, refs) -> None:
        self.published.extend(refs)

    def advance(self, run_id) -> None:
        pass


def test_the_scheduler_ends_a_pending_distributed_run_past_its_deadline(tmp_path):
    config = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}")
    with with_configuration(config):
        rt = config.runtime()
        first = RecallAgent.build_run("first", session_id="conv-1", actor_id="user-7")
        rt.begin(first, distributed=True)
        assert rt.store.claim_step(first.id, FIRST, current_holder(), lease_seconds=300) == 1  # a live worker runs it
        second = RecallAgent.build_run("second", session_id="conv-1", actor_id="user-7", deadline=0.2)
        rt.begin(second, distributed=True)
        assert rt.store.load_run(second.id).status == "pending"
        wait_for(lambda: time.time() > second.invocation.deadline_at.timestamp())

        Scheduler(rt, publisher=_Publisher()).run_once()

        assert rt.store.load_run(second.id).status == "partial"
        assert rt.store.load_run(first.id).status == "running"
    config.close()


def _dead_holder() -> str:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{hostname()}:{child.pid}:1"


def test_waiting_behind_a_run_left_by_a_dead_process_says_so(file_config, caplog):
    rt = file_config.runtime()
    crashed = RecallAgent.build_run("first", session_id="conv-1", actor_id="user-7")
    rt.begin(crashed)  # a local run stored by a process that then died before running it
    with rt.store.db.transaction() as tx:
        tx.cursor.execute("UPDATE lg_runs SET holder = ? WHERE id = ?", (_dead_holder(), crashed.id))

    with caplog.at_level(logging.WARNING, logger="lg_core.opening"):
        # The warning comes at once; the deadline must not pass before the wait begins.
        run = RecallAgent.ask("second", session_id="conv-1", actor_id="user-7", deadline=3)

    assert run.outcome == "partial"  # the deadline still bounds the wait
    warnings = [r.getMessage() for r in caplog.records if crashed.id in r.getMessage()]
    assert len(warnings) == 1 and f"lg runs resume {crashed.id}" in warnings[0]


@pytest.mark.parametrize("make", ["memory", "fs", "sql"])
def test_an_id_with_a_trailing_newline_is_refused(tmp_path, make):
    store = {
        "memory": MemorySessionStore,
        "fs": lambda: FilesystemSessionStore(tmp_path / "s"),
        "sql": lambda: SqlSessionStore("sqlite://"),
    }[make]()
    for session_id, actor_id in (("conv-1\n", None), ("conv-1", "user-7\n")):
        with pytest.raises(InvocationError):
            store.append(
                session_id,
                actor_id=actor_id,
                messages=[Message(role="user", content="hi")],
                state={},
                metadata={},
                expected_count=0,
            )


def test_run_and_interjection_ids_with_a_trailing_newline_are_refused(config):
    with pytest.raises(InvocationError):
        RecallAgent.ask("hi", run_id="run-1\n")
    with pytest.raises(InvocationError):
        RecallAgent.ask("hi", session_id="a" * 128 + "\n")


def test_an_undecodable_session_file_is_a_protocol_error(tmp_path):
    store = FilesystemSessionStore(tmp_path / "s")
    store.append("conv-1", messages=[Message(role="user", content="hi")], state={}, metadata={}, expected_count=0)
    store._path(("conv-1", None)).write_bytes(b"\xff\xfe not utf-8 \x80")
    with pytest.raises(ProtocolError, match="is not a valid snapshot"):
        store.load("conv-1")


def test_a_run_on_a_corrupt_session_file_fails_and_logs_the_reason_without_a_traceback(tmp_path, caplog):
    """The run reports the store's ProtocolError; restoring the session after it is logged in one line."""
    store = FilesystemSessionStore(tmp_path / "s")
    store.append("conv-1", messages=[Message(role="user", content="hi")], state={}, metadata={}, expected_count=0)
    store._path(("conv-1", None)).write_text("{not json")
    configuration = Configuration(session_store=store)
    with with_configuration(configuration), caplog.at_level(logging.WARNING):
        run = RecallAgent.ask("hello", session_id="conv-1")
    configuration.close()

    assert run.outcome == "failed" and isinstance(run.error, ProtocolError)
    [record] = [r for r in caplog.records if "could not restore session 'conv-1'" in r.getMessage()]
    assert "is not a valid snapshot" in record.getMessage()
    assert record.exc_info is None
