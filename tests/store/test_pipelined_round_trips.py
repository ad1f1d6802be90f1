"""A pipelined PostgreSQL transaction waits for the server only where it needs a result.

psycopg answers every pipeline sync with a round trip to the server, even when
nothing was queued since the last one. Under load each wait also costs the
waiting thread its turn at the GIL, so a run's finishing commit that waited
five times before its COMMIT (the guards, then each guard's result again, the
session's row, the session's open runs) took measurably longer than one that
waits twice.
"""

from __future__ import annotations

import pytest
from psycopg import Pipeline

from lg_core import Agent, Configuration, with_configuration
from lg_core.providers import scripted
from lg_core.store.repository import RunStore


@pytest.fixture
def syncs(monkeypatch):
    """The pipeline syncs made so far (each a round trip to the server)."""
    made = []
    original = Pipeline.sync

    def counted(self):
        made.append(1)
        return original(self)

    monkeypatch.setattr(Pipeline, "sync", counted)
    return made


def test_results_an_earlier_sync_brought_are_read_without_waiting_again(pg_url, syncs):
    store = RunStore(pg_url)
    try:
        with store.db.transaction(pipelined=True) as tx:
            first = tx.submit("select_run_flags", {"run_id": "nobody"})
            second = tx.submit("select_run_flags", {"run_id": "nobody either"})
            assert first.one() is None
            assert second.one() is None and second.rowcount == 0
            tx.sync()  # nothing queued since
            assert len(syncs) == 1
            tx.send("select_run_flags", {"run_id": "queued"})
            tx.sync()
            assert len(syncs) == 2
    finally:
        store.close()


def test_a_results_read_after_a_later_statement_waits_for_that_one_too(pg_url, syncs):
    store = RunStore(pg_url)
    try:
        with store.db.transaction(pipelined=True) as tx:
            early = tx.submit("select_run_flags", {"run_id": "nobody"})
            assert tx.fetchone("select_run_flags", {"run_id": "late"}) is None  # a sync of its own
            assert early.one() is None
            assert len(syncs) == 1
    finally:
        store.close()


class OneTurnAgent(Agent):
    model = "scripted:pipelined-round-trips"


def test_a_runs_finishing_commit_reads_its_session_with_its_guards(pg_url, syncs, monkeypatch):
    scripted.register("pipelined-round-trips", lambda request: {"text": "done"})
    per_commit: list[tuple[bool, int]] = []
    original = RunStore.commit

    def commit(self, step_commit, now=None):
        before = len(syncs)
        try:
            return original(self, step_commit, now)
        finally:
            per_commit.append((step_commit.finish is not None, len(syncs) - before))

    monkeypatch.setattr(RunStore, "commit", commit)
    configuration = Configuration(run_store=pg_url)
    try:
        with with_configuration(configuration):
            run = OneTurnAgent.ask("hello", session_id="conv-1")
    finally:
        configuration.close()
        scripted.unregister("pipelined-round-trips")

    assert run.completed
    [finishing] = [made for finished, made in per_commit if finished]
    # One for the guards with the session's lock and open runs, one for the session's new row;
    # COMMIT is the pipeline's exit, not a sync.
    assert finishing == 2


def test_a_claim_that_also_reads_its_run_waits_no_more_than_one_that_does_not(pg_url, syncs):
    """A worker's first step of a run reads the run's row with its claim: no sync of its own."""
    scripted.register("pipelined-round-trips", lambda request: {"text": "done"})
    configuration = Configuration(run_store=pg_url)
    try:
        runtime = configuration.runtime()
        with with_configuration(configuration):
            (first,) = runtime.begin(OneTurnAgent.build_run("one"), distributed=True)
            (second,) = runtime.begin(OneTurnAgent.build_run("two"), distributed=True)
        made = []
        for ref, with_run in ((first, False), (second, True)):
            before = len(syncs)
            start = runtime.store.claim_and_load(ref.run_id, ref.key, "host:1:1", 30, with_run=with_run)
            assert start.attempts == 1 and (start.run is not None) == with_run
            made.append(len(syncs) - before)
        assert made[1] == made[0], made
    finally:
        configuration.close()
        scripted.unregister("pipelined-round-trips")
