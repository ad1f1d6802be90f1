"""``lg runs retry`` and ``lg runs fork``, driven in-process with Typer's CliRunner on a SQLite file store."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import lg_core
from lg_core import Configuration, with_configuration
from lg_core.cli import app, runs_app
from lg_core.replay_cli import parse_settings, register
from tests.replay.replay_app import ReplayAgent, step_calls


@pytest.fixture(autouse=True)
def commands(monkeypatch):
    """The replay commands on the ``lg`` app (``main()`` adds them from the entry point)."""
    for name in ("LG_RUN_STORE", "LG_IMPORTS", "LG_BROKER_URL", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    if not any(command.name == "retry" for command in runs_app.registered_commands):
        register(app, runs_app)


@pytest.fixture
def store(tmp_path):
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.fixture
def failed(store, outage):
    """``(model, run_id)``: a run in ``store`` that failed at turn 3 while its provider was down."""
    model, target = outage
    configuration = Configuration(run_store=store)
    with with_configuration(configuration):
        run = ReplayAgent.ask("Record every step.", target=target, run_id="cli-run")
    configuration.close()
    assert run.outcome == "failed"
    return model, run.id


def lg(*args: str):
    return CliRunner().invoke(app, list(args))


def assert_usage_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def stored(store: str, run_id: str):
    configuration = Configuration(run_store=store)
    try:
        with with_configuration(configuration):
            record = lg_core.current_runtime().store.load_run(run_id)
            return record, [(e.seq, e.type) for e in lg_core.current_runtime().store.load_events(run_id)]
    finally:
        configuration.close()


def test_show_lists_the_step_keys_to_fork_from(store, failed):
    result = lg("runs", "show", "cli-run", "--store", store)
    assert result.exit_code == 0, result.output
    for key in ("root/turn-0/model", "root/turn-2/tool/call_2_0", "root/turn-3/model"):
        assert key in result.stdout


def test_retry_streams_the_rest_of_the_run_and_exits_0(store, failed):
    model, run_id = failed
    model.down = False

    result = lg("runs", "retry", run_id, "--store", store)

    assert result.exit_code == 0, result.output
    assert result.stdout == "All steps recorded.\n"
    assert "retrying step root/turn-3/model from the checkpoint of root/turn-2/tool/call_2_0" in result.stderr
    assert "it ended failed: HTTPError: the provider is down" in result.stderr
    assert f"completed run {run_id}" in result.stderr
    assert step_calls() == [0, 1, 2]
    record, events = stored(store, run_id)
    assert record.status == "completed"
    assert [seq for seq, _type in events] == list(range(1, len(events) + 1))
    assert "run_retried" in {kind for _seq, kind in events}


def test_retry_that_fails_again_exits_1(store, failed):
    result = lg("runs", "retry", failed[1], "--store", store)
    assert result.exit_code == 1, result.output
    assert "failed run cli-run: HTTPError: the provider is down" in result.stderr


def test_fork_with_a_model_settings_and_run_id(store, failed, script):
    echo = script(lambda request: {"text": json.dumps(request.settings, sort_keys=True)})

    result = lg(
        "runs",
        "fork",
        failed[1],
        "--from-step",
        "root/turn-1/model",
        "--model",
        echo,
        "--setting",
        "temperature=0.2",
        "--setting",
        "tone=dry",
        "--run-id",
        "cli-fork",
        "--store",
        store,
    )

    assert result.exit_code == 0, result.output
    assert result.stdout == '{"temperature": 0.2, "tone": "dry"}\n'
    assert "forked run cli-fork from cli-run at step root/turn-1/model" in result.stderr
    assert f"model {echo}" in result.stderr
    record, events = stored(store, "cli-fork")
    assert record.parent_run_id == "cli-run" and record.status == "completed"
    assert [seq for seq, _type in events] == list(range(1, len(events) + 1))


def test_fork_with_a_new_deadline(store, failed, script):
    result = lg(
        "runs",
        "fork",
        failed[1],
        "--from-step",
        "root/turn-3/model",
        "--model",
        script([{"text": "ok"}] * 4),
        "--deadline",
        "60",
        "--store",
        store,
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "ok\n"


def test_retry_and_fork_usage_errors(store, failed):
    assert_usage_error(lg("runs", "retry", "nope", "--store", store), "no run with id 'nope'")
    assert_usage_error(
        lg("runs", "fork", "cli-run", "--from-step", "root/turn-9/model", "--store", store),
        "does not exist",
        "root/turn-3/model",
    )
    assert_usage_error(
        lg("runs", "fork", "cli-run", "--from-step", "root/turn-1/model", "--setting", "temperature", "--store", store),
        "--setting expects KEY=VALUE",
    )
    assert_usage_error(
        lg("runs", "fork", "cli-run", "--from-step", "root/turn-1/model", "--model", "no-such-role", "--store", store),
        "no-such-role",
    )
    assert_usage_error(lg("runs", "retry", "cli-run"), "no run store configured")
    missing = lg("runs", "fork", "cli-run", "--store", store)
    assert missing.exit_code == 2 and "--from-step" in missing.output


def test_an_unreachable_broker_refuses_a_retry_before_reopening_the_run(store, failed, monkeypatch):
    monkeypatch.setenv("LG_BROKER_URL", "redis://127.0.0.1:1/0")  # nothing listens on port 1
    assert_usage_error(
        lg("runs", "retry", "cli-run", "--store", store), "cannot reach the broker at redis://127.0.0.1:1/0"
    )
    assert_usage_error(
        lg("runs", "fork", "cli-run", "--from-step", "root/turn-1/model", "--store", store), "cannot reach the broker"
    )
    monkeypatch.setenv("LG_BROKER_URL", "notaurl")
    assert_usage_error(lg("runs", "retry", "cli-run", "--store", store), "is not a Redis URL")
    monkeypatch.delenv("LG_BROKER_URL")  # reading the store here needs no broker
    record, _events = stored(store, "cli-run")
    assert record.status == "failed"  # not reopened: a later retry still works


def test_retrying_a_completed_run_is_a_usage_error(store, failed):
    model, run_id = failed
    model.down = False
    assert lg("runs", "retry", run_id, "--store", store).exit_code == 0
    assert_usage_error(lg("runs", "retry", run_id, "--store", store), "completed", "lg runs fork")


def test_parse_settings_reads_json_values_and_keeps_text():
    assert parse_settings(["temperature=0.2", "max_tokens=100", "tone=dry", 'stop=["x"]', "empty="]) == {
        "temperature": 0.2,
        "max_tokens": 100,
        "tone": "dry",
        "stop": ["x"],
        "empty": "",
    }


def test_the_lg_command_has_the_replay_commands():
    """The entry point in pyproject.toml adds them to the installed ``lg``."""
    result = subprocess.run(
        [sys.executable, "-c", "from lg_core.cli import main; main()", "runs", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "retry" in result.stdout and "fork" in result.stdout


# -- lg runs retry-failed ------------------------------------------------------------------


def _fail_runs(store: str, target: str, *run_ids: str) -> None:
    configuration = Configuration(run_store=store)
    with with_configuration(configuration):
        for run_id in run_ids:
            assert ReplayAgent.ask("Record every step.", target=target, run_id=run_id).outcome == "failed"
    configuration.close()


def _age_run(store: str, run_id: str, seconds: float) -> None:
    from sqlalchemy import text

    configuration = Configuration(run_store=store)
    with with_configuration(configuration), lg_core.current_runtime().store.db.engine.begin() as conn:
        conn.execute(
            text("UPDATE lg_runs SET finished_at = finished_at - :s WHERE id = :id"), {"s": seconds, "id": run_id}
        )
    configuration.close()


def test_retry_failed_retries_the_runs_that_failed_in_the_window(store, outage):
    model, target = outage
    _fail_runs(store, target, "outage-1", "outage-2", "long-ago")
    _age_run(store, "long-ago", 3 * 3600)

    listed = lg("runs", "retry-failed", "--since", "1h", "--dry-run", "--store", store)
    assert listed.exit_code == 0, listed.output
    assert "would retry outage-1 (failed: HTTPError: the provider is down)" in listed.stderr
    assert "outage-2" in listed.stderr and "long-ago" not in listed.stderr
    assert stored(store, "outage-1")[0].status == "failed"  # a dry run changes nothing

    model.down = False
    result = lg("runs", "retry-failed", "--since", "1h", "--store", store)

    assert result.exit_code == 0, result.output
    assert "retried outage-1: completed" in result.stderr and "retried outage-2: completed" in result.stderr
    assert "2 of 2 run(s) retried" in result.stderr
    assert [stored(store, r)[0].status for r in ("outage-1", "outage-2", "long-ago")] == [
        "completed",
        "completed",
        "failed",
    ]
    again = lg("runs", "retry-failed", "--since", "1h", "--store", store)
    assert again.exit_code == 0 and "no failed runs ended in the last 1h" in again.stderr


def test_retry_failed_exits_1_when_a_run_fails_again(store, outage):
    _model, target = outage
    _fail_runs(store, target, "still-down")
    result = lg("runs", "retry-failed", "--since", "1h", "--store", store)
    assert result.exit_code == 1, result.output
    assert "retried still-down: failed" in result.stderr and "0 of 1 run(s) retried" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--since", "soon"], "--since must be an age"),
        (["--since", "1h", "--status", "completed"], "only failed and cancelled runs can be retried"),
    ],
)
def test_retry_failed_usage_errors(store, args, fragment):
    assert_usage_error(lg("runs", "retry-failed", *args, "--store", store), fragment)


def test_retry_failed_goes_on_past_a_run_whose_retry_raises(store, outage, monkeypatch):
    model, target = outage
    _fail_runs(store, target, "hook-breaks", "fine")
    model.down = False
    original = lg_core.replay.retry

    def retry(run_id, **options):
        if run_id == "hook-breaks":
            raise OSError("tenant database unreachable")  # e.g. a prepare_run hook's own error
        return original(run_id, **options)

    monkeypatch.setattr(lg_core.replay, "retry", retry)
    result = lg("runs", "retry-failed", "--since", "1h", "--store", store)

    assert result.exit_code == 1, result.output
    assert "skipped hook-breaks: OSError: tenant database unreachable" in result.stderr
    assert "retried fine: completed" in result.stderr and "1 of 2 run(s) retried" in result.stderr


def test_runs_to_retry_takes_one_status_as_text(store, outage):
    _model, target = outage
    _fail_runs(store, target, "one-status")
    configuration = Configuration(run_store=store)
    with with_configuration(configuration):
        assert [r.id for r in lg_core.replay.runs_to_retry("1h", statuses="failed")] == ["one-status"]
        with pytest.raises(lg_core.InvocationError, match="only failed and cancelled"):
            lg_core.replay.runs_to_retry("1h", statuses="completed")
    configuration.close()
