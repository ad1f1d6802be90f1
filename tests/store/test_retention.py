"""Retention: ``prune_runs`` and ``lg runs prune`` delete old finished runs and all their rows.

Runs on every backend (SQLite in memory and on file, PostgreSQL): the runs are
real runs of an agent with a tool, so every table a run writes has rows.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from lg_core import Agent, Configuration, InvocationError, Tool, prune_runs, with_configuration
from lg_core.cli import app
from lg_core.providers import scripted
from lg_core.store import NewStep, retention

DAY = 86400.0
TABLES_BY_RUN = ("lg_steps", "lg_events", "lg_frames", "lg_interjections")


class LookupTool(Tool):
    description = "Look something up."
    input_schema = {"type": "object", "properties": {"q": {"type": "string"}}}

    def call(self, input):
        return "found"


def _script(request):
    if not any(m.role == "tool" for m in request.messages):
        return {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}
    return {"text": "done"}


scripted.register("retention", _script)


class RetentionAgent(Agent):
    model = "scripted:retention"
    tools = [LookupTool]


class FailingAgent(Agent):
    model = "scripted:retention-failing"


scripted.register("retention-failing", [{"error": "upstream down"}])


@pytest.fixture(params=["memory", "file", "postgres"])
def config(request, tmp_path):
    if request.param == "memory":
        url = "sqlite://"
    elif request.param == "file":
        url = f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    configuration = Configuration(run_store=url)
    with with_configuration(configuration):
        yield configuration
    configuration.close()


def _store(config):
    return config.runtime().store


def _age(config, run_id: str, days: float) -> None:
    """Make ``run_id`` look as if it was created and finished ``days`` ago."""
    then = time.time() - days * DAY
    with _store(config).db.engine.begin() as conn:
        conn.execute(
            text("UPDATE lg_runs SET created_at = :t, finished_at = :t WHERE id = :id"), {"t": then, "id": run_id}
        )


def _rows(config, run_id: str) -> dict[str, int]:
    counts = {}
    with _store(config).db.engine.connect() as conn:
        for table in TABLES_BY_RUN:
            counts[table] = conn.execute(
                text(f"SELECT count(*) FROM {table} WHERE run_id = :id"), {"id": run_id}
            ).scalar()
        counts["lg_messages"] = conn.execute(
            text("SELECT count(*) FROM lg_messages WHERE frame_id LIKE :frames"), {"frames": f"{run_id}/%"}
        ).scalar()
        counts["lg_runs"] = conn.execute(text("SELECT count(*) FROM lg_runs WHERE id = :id"), {"id": run_id}).scalar()
    return counts


def _ask(agent=RetentionAgent, **options) -> str:
    run = agent.ask("hi", **options)
    assert run.outcome == ("completed" if agent is RetentionAgent else "failed"), run.error
    return run.id


def test_old_finished_runs_go_with_every_row_and_the_rest_stay(config):
    old, recent, old_failed = _ask(), _ask(), _ask(FailingAgent)
    _age(config, old, 40)
    _age(config, old_failed, 40)
    assert _rows(config, old)["lg_steps"] > 0 and _rows(config, old)["lg_messages"] > 0

    report = prune_runs(timedelta(days=30))

    assert (report.runs, report.batches, report.dry_run) == (2, 0, False)
    for run_id in (old, old_failed):
        assert set(_rows(config, run_id).values()) == {0}, run_id
    assert all(_rows(config, recent)[table] > 0 for table in ("lg_runs", "lg_steps", "lg_events", "lg_messages"))
    assert [r.id for r in config.runtime().list_runs()] == [recent]


def _session_rows(config, session_id: str) -> tuple[int, int]:
    with _store(config).db.engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(text(f"SELECT count(*) FROM {table} WHERE session_id = :id"), {"id": session_id}).scalar()
            for table in ("lg_sessions", "lg_session_messages")
        )


def test_a_run_s_own_session_goes_with_it_and_a_named_or_continued_one_stays(config):
    """A run asked without a session_id keeps its messages and context as a session of its own,
    keyed by its id: pruning the run deleted everything but that, so retention never ended it."""
    own = _ask()
    continued = _ask()
    later = _ask(session_id=continued)  # a later run continues the second run's session
    named = _ask(session_id="conversation-42")
    assert _session_rows(config, own)[0] == 1 and _session_rows(config, own)[1] > 0
    for run_id in (own, continued, later, named):
        _age(config, run_id, 40)
    _age(config, later, 1)  # still in the store: it continues `continued`'s session

    assert prune_runs(timedelta(days=30)).runs == 3

    assert _session_rows(config, own) == (0, 0)
    assert _session_rows(config, continued)[0] == 1, "a run still in the store continues it"
    assert _session_rows(config, "conversation-42")[0] == 1, "a named session outlives its runs"


def test_statuses_narrow_and_dry_run_deletes_nothing(config):
    completed, failed = _ask(), _ask(FailingAgent)
    _age(config, completed, 10)
    _age(config, failed, 10)

    assert prune_runs("1d", dry_run=True) == retention.PruneReport(2, 0, True)
    assert _rows(config, completed)["lg_runs"] == 1

    assert prune_runs("1d", statuses=["completed"]).runs == 1
    assert _rows(config, completed)["lg_runs"] == 0
    assert _rows(config, failed)["lg_runs"] == 1  # kept longer, as asked


def test_a_running_run_is_never_pruned(config):
    store = _store(config)
    run = RetentionAgent.build_run("hi")
    config.runtime().begin(run)  # stored and running; nothing executes it here
    _age(config, run.id, 100)
    assert prune_runs(0).runs == 0
    assert store.load_run(run.id).status == "running"


def test_runs_of_a_batch_that_can_still_resume_are_kept(config):
    store = _store(config)
    unfinished, finished = "retention-open", "retention-done"
    for batch_id in (unfinished, finished):
        store.open_batch(
            {"id": batch_id, "agent": "app:A", "input_hash": "h", "input_path": "/in.jsonl", "total": 1, "holder": "me"}
        )
    store.update_batch(finished, "me", {"completed": 1}, finished=True)
    kept, gone = _ask(run_id=f"{unfinished}.1"), _ask(run_id=f"{finished}.1")
    for run_id in (kept, gone):
        _age(config, run_id, 40)
    with store.db.engine.begin() as conn:
        conn.execute(
            text("UPDATE lg_batches SET finished_at = :t WHERE id = :id"), {"t": time.time() - 40 * DAY, "id": finished}
        )

    assert prune_runs("30d") == retention.PruneReport(1, 1)
    assert store.load_batch(finished) is None and store.load_batch(unfinished) is not None
    assert _rows(config, kept)["lg_runs"] == 1 and _rows(config, gone)["lg_runs"] == 0


def test_a_run_retried_after_it_was_selected_is_left_whole(config):
    run_id = _ask()
    _age(config, run_id, 40)
    with _store(config).db.engine.begin() as conn:  # what retry does to the row between select and delete
        conn.execute(text("UPDATE lg_runs SET status = 'running', finished_at = NULL WHERE id = :id"), {"id": run_id})

    assert retention._delete_run(_store(config).db, run_id, "completed", time.time()) == 0
    assert _rows(config, run_id)["lg_steps"] > 0


@pytest.mark.parametrize(
    "age",
    [
        -1,
        "30 days",
        "abc",
        float("nan"),
        True,
        None,
        "5y",
        2**63,
        pytest.param(10**400, id="10**400"),
        pytest.param(-(10**400), id="-10**400"),
    ],
)
def test_bad_ages_are_refused(config, age):
    with pytest.raises(InvocationError, match="older_than"):
        prune_runs(age)


@pytest.mark.parametrize("statuses", [["running"], ["pending"], [], ["completed", "nope"], 5, [5], [["completed"]]])
def test_unfinished_or_unknown_statuses_are_refused(config, statuses):
    with pytest.raises(InvocationError, match="only finished runs can be pruned"):
        prune_runs("1d", statuses=statuses)


def test_lg_runs_prune(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    configuration = Configuration(run_store=url)
    with with_configuration(configuration):
        old, recent = _ask(), _ask()
        _age(configuration, old, 3)
    configuration.close()
    runner = CliRunner()

    dry = runner.invoke(app, ["runs", "prune", "--older-than", "2d", "--dry-run", "--store", url])
    assert dry.exit_code == 0 and "would delete 1 run(s)" in dry.stderr
    done = runner.invoke(app, ["runs", "prune", "--older-than", "2d", "--store", url])
    assert done.exit_code == 0 and "deleted 1 run(s)" in done.stderr
    listed = runner.invoke(app, ["runs", "list", "--json", "--store", url])
    assert old not in listed.stdout and recent in listed.stdout

    for args, fragment in [
        (["--older-than", "2 fortnights"], "--older-than must be an age"),
        (["--older-than", "2d", "--status", "running"], "only finished runs can be pruned"),
    ]:
        bad = runner.invoke(app, ["runs", "prune", *args, "--store", url])
        assert bad.exit_code == 2 and fragment in bad.stderr, bad.output


class _NoBroker:
    """Recovery's publisher for a scheduler whose other sweeps find nothing to send."""

    def publish(self, refs):
        raise AssertionError(f"nothing should be re-sent here: {refs}")

    def advance(self, run_id):
        raise AssertionError(f"nothing should be advanced here: {run_id}")


def test_the_scheduler_applies_run_retention_once_an_hour(tmp_path):
    from lg_scheduler.scheduler import Scheduler

    configuration = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}", run_retention="7d")
    with with_configuration(configuration):
        first, second = _ask(), _ask()
        _age(configuration, first, 8)
        scheduler = Scheduler(configuration.runtime(), publisher=_NoBroker())

        assert scheduler.run_once()["pruned"] == 1
        _age(configuration, second, 8)
        assert scheduler.run_once()["pruned"] == 0  # the next retention pass is an hour away
        assert _rows(configuration, second)["lg_runs"] == 1
    configuration.close()


def test_without_run_retention_the_scheduler_keeps_everything(tmp_path):
    from lg_scheduler.scheduler import Scheduler

    configuration = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}")
    with with_configuration(configuration):
        run_id = _ask()
        _age(configuration, run_id, 10_000)
        assert Scheduler(configuration.runtime(), publisher=_NoBroker()).run_once()["pruned"] == 0
        assert _rows(configuration, run_id)["lg_runs"] == 1
    configuration.close()


@pytest.mark.parametrize("value", ["forever", "-3d", "30"])
def test_a_bad_run_retention_is_a_configuration_error(value):
    from lg_core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="run_retention must be an age"):
        Configuration(run_retention=value)


def test_the_lg_recover_task_applies_run_retention_once_an_hour_too(tmp_path, monkeypatch):
    # Celery beat sends lg.recover every second: each pass must not start a retention pass of its own.
    from lg_scheduler import scheduler as scheduler_module
    from lg_scheduler import tasks

    configuration = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}", run_retention="7d")
    monkeypatch.setattr(tasks, "worker_runtime", configuration.runtime)
    monkeypatch.setattr(scheduler_module, "_backend_publisher", lambda runtime: _NoBroker())
    with with_configuration(configuration):
        first, second = _ask(), _ask()
        _age(configuration, first, 8)

        assert tasks.recover()["pruned"] == 1
        _age(configuration, second, 8)
        assert tasks.recover()["pruned"] == 0  # the next retention pass is an hour away
        assert _rows(configuration, second)["lg_runs"] == 1
    configuration.close()


def test_the_scheduler_takes_a_backlog_of_old_runs_a_slice_per_pass(tmp_path, monkeypatch):
    # Turning retention on over a large store must not stop the other recovery sweeps
    # (ending runs, the relay, the lease sweep) until every old run is deleted.
    from lg_scheduler import scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "PRUNE_LIMIT", 2)
    configuration = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}", run_retention="7d")
    with with_configuration(configuration):
        for run_id in [_ask() for _ in range(5)]:
            _age(configuration, run_id, 8)
        scheduler = scheduler_module.Scheduler(configuration.runtime(), publisher=_NoBroker())

        assert [scheduler.run_once()["pruned"] for _ in range(4)] == [2, 2, 1, 0]
    configuration.close()


def test_a_batch_whose_failed_runs_are_kept_keeps_its_row(config):
    store = _store(config)
    batch = "retention-mixed"
    store.open_batch(
        {"id": batch, "agent": "app:A", "input_hash": "h", "input_path": "/in.jsonl", "total": 2, "holder": "me"}
    )
    store.update_batch(batch, "me", {"completed": 1, "failed": 1}, finished=True)
    done, failed = _ask(run_id=f"{batch}.1"), _ask(FailingAgent, run_id=f"{batch}.2")
    for run_id in (done, failed):
        _age(config, run_id, 40)
    with store.db.engine.begin() as conn:
        conn.execute(
            text("UPDATE lg_batches SET finished_at = :t WHERE id = :id"), {"t": time.time() - 40 * DAY, "id": batch}
        )

    assert prune_runs("30d", statuses=["completed"]) == retention.PruneReport(1, 0)
    assert store.load_batch(batch) is not None  # its failed run is still there, so is the batch


def _stored_run(config, run_id: str, status: str, days: float) -> None:
    """A run stored directly (a step and two events, no agent run), ``status`` and created and finished ``days`` ago."""
    _store(config).create_run(
        {
            "id": run_id,
            "entrypoint": "app:A",
            "kind": "agent",
            "status": "running",
            "invocation": {"message": "hi"},
            "session_id": run_id,
            "actor_id": None,
            "holder": "host:1:1",
            "deadline_at": None,
        },
        {
            "id": f"{run_id}/root",
            "run_id": run_id,
            "path": "root",
            "kind": "agent",
            "entrypoint": "app:A",
            "version": 0,
            "checkpoint": {},
        },
        [],
        [("invocation_start", {"run_id": run_id})],
        [NewStep(key="root/turn-0/model", frame_id=f"{run_id}/root", kind="model")],
    )
    then = time.time() - days * DAY
    finished = None if status == "running" else then
    with _store(config).db.engine.begin() as conn:
        conn.execute(
            text("UPDATE lg_runs SET status = :s, created_at = :t, finished_at = :f WHERE id = :id"),
            {"s": status, "t": then, "f": finished, "id": run_id},
        )


def _run_ids(config) -> set[str]:
    with _store(config).db.engine.connect() as conn:
        return set(conn.execute(text("SELECT id FROM lg_runs")).scalars())


def test_a_backlog_larger_than_a_pass_is_pruned_over_several_passes_oldest_first(config, monkeypatch):
    """Each scheduler pass looks at PRUNE_LIMIT old runs at most, from where the last one stopped:
    a slice of runs a batch keeps is read once, not again by every pass, and nothing kept is touched."""
    from lg_scheduler import scheduler as scheduler_module

    config.run_retention = "30d"  # before the runtime starts
    store = _store(config)
    for batch_id in ("open", "done"):
        store.open_batch(
            {"id": batch_id, "agent": "app:A", "input_hash": "h", "input_path": "/in.jsonl", "total": 3, "holder": "me"}
        )
    store.update_batch("done", "me", {"completed": 3}, finished=True)
    with store.db.engine.begin() as conn:
        conn.execute(text("UPDATE lg_batches SET finished_at = :t WHERE id = 'done'"), {"t": time.time() - 90 * DAY})
    kept = [f"open.{i}" for i in range(12)]  # the oldest: a batch that never finished keeps its runs
    for age, run_id in enumerate(kept):
        _stored_run(config, run_id, "completed", 200 - age)
    _stored_run(config, "still-running", "running", 300)
    _stored_run(config, "recent", "failed", 1)
    # Ten old enough, every finished status among them, oldest first: old-0 (80 days) ... old-9 (71 days).
    statuses = [
        "failed",
        "completed",
        "cancelled",
        "partial",
        "completed",
        "failed",
        "completed",
        "completed",
        "failed",
        "partial",
    ]
    old = [f"old-{i}" for i in range(7)] + [f"done.{i}" for i in range(3)]
    for age, (run_id, status) in enumerate(zip(old, statuses, strict=True)):
        _stored_run(config, run_id, status, 80 - age)
    kept_rows = {run_id: _rows(config, run_id) for run_id in [*kept, "still-running", "recent"]}

    read: list[int] = []
    page = retention._page
    monkeypatch.setattr(retention, "_page", lambda *args: (rows := page(*args), read.append(len(rows)))[0])
    monkeypatch.setattr(scheduler_module, "PRUNE_LIMIT", 3)
    scheduler = scheduler_module.Scheduler(config.runtime(), publisher=_NoBroker())

    pruned, remaining, rows_read = [], [], []
    for _ in range(9):
        read.clear()
        pruned.append(scheduler.run_once()["pruned"])
        remaining.append(sorted(set(old) & _run_ids(config), key=old.index))
        rows_read.append(sum(read))
        if len(pruned) == 7:
            assert store.load_batch("done") is not None  # its runs are not all gone yet: the row waits

    # Four slices of kept runs, then the old runs three at a time, oldest first whatever their status;
    # the slice that reaches the end is the last until the next retention period.
    assert pruned == [0, 0, 0, 0, 3, 3, 3, 1, 0]
    assert remaining[4] == old[3:] and remaining[5] == old[6:] and remaining[6] == old[9:] and remaining[7] == []
    # A pass reads one page of PRUNE_LIMIT + 1 ids per status at most, never the whole backlog.
    assert max(rows_read) <= len(retention.RUN_TERMINAL) * 4, rows_read
    assert store.load_batch("done") is None and store.load_batch("open") is not None
    assert _run_ids(config) == set(kept_rows)
    assert {run_id: _rows(config, run_id) for run_id in kept_rows} == kept_rows


def test_a_bounded_prune_resumes_where_it_stopped(config):
    for age, run_id in enumerate(["a", "b", "c", "d", "e"]):
        _stored_run(config, run_id, "completed" if age % 2 else "failed", 50 - age)

    first = prune_runs("30d", limit=2, dry_run=True)
    assert (first.runs, first.resume_after is not None) == (2, True)
    rest = prune_runs("30d", limit=10, dry_run=True, after=first.resume_after)
    assert (rest.runs, rest.resume_after) == (3, None)
    assert prune_runs("30d", limit=2).runs == 2 and _run_ids(config) == {"c", "d", "e"}  # the two oldest

    with pytest.raises(InvocationError, match="after must be None or a report's resume_after"):
        prune_runs("30d", limit=2, after="e")


@pytest.mark.parametrize(
    "after",
    [
        (2**63, "x"),
        (float("inf"), "x"),
        pytest.param((10**400, "x"), id="10**400"),
        pytest.param((-(10**400), "x"), id="-10**400"),
    ],
)
def test_a_resume_position_the_store_cannot_compare_is_refused(config, after):
    """A huge int overflowed in the database driver (OverflowError), not an InvocationError."""
    with pytest.raises(InvocationError, match="after must be None or a report's resume_after"):
        prune_runs("30d", after=after, dry_run=True)


@pytest.mark.parametrize("limit", [0, True, 2**63, pytest.param(10**400, id="10**400")])
def test_a_limit_the_store_cannot_take_is_refused(config, limit):
    with pytest.raises(InvocationError, match=f"limit must be an integer from 1 to {2**63 - 1} or None"):
        prune_runs("30d", limit=limit, dry_run=True)
