"""`lg worker` and `lg scheduler` as an operator runs them: settings from flags, lg.yaml or the environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lg_core import Configuration, with_configuration
from lg_scheduler.stack.servers import RedisServer
from tests.ops.support import DIST_APP_DIR, LG, descendants, lg, lg_env, live_pids


@pytest.fixture
def redis_url():
    server = RedisServer().start()
    yield server.url
    server.stop()


def wait_for(path, text: str, process: subprocess.Popen, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text() if path.exists() else ""
        if content.count(text) and process.poll() is None:
            return content
        if process.poll() is not None:
            raise AssertionError(f"exited with {process.returncode}:\n{content[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in the log after {timeout} s:\n{path.read_text()[-3000:]}")


def wait_ready(log, count: int, process: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while log.read_text().count(" ready.") < count:
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.distributed
def test_lg_worker_reads_lg_yaml_runs_an_agent_and_stops_on_sigterm(tmp_path, pg_url, redis_url):
    (tmp_path / "lg.yaml").write_text(f"run_store: {pg_url}\nbroker_url: {redis_url}\nimports: [dist_app]\n")
    log = tmp_path / "worker.log"
    with log.open("w") as handle:
        worker = subprocess.Popen(
            [*LG, "worker", "--queues", "lg.orchestrate,lg.model,lg.tools", "--concurrency", "2"],
            cwd=tmp_path,
            env=lg_env(),
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_ready(log, 1, worker)  # one thread-pool worker for the three queues
        text = log.read_text()
        assert "worker: lg.orchestrate, lg.model, lg.tools on a threads pool of 2" in text
        assert text.count(" ready.") == 1

        sys.path.insert(0, str(DIST_APP_DIR))
        import dist_app

        config = Configuration(run_store=pg_url, broker_url=redis_url)
        with with_configuration(config):
            run = dist_app.StepAgent.start_execution("Record every step.").wait(timeout=120)
        config.close()
        assert run.completed, run.error

        processes = descendants(worker.pid)
        assert len(processes) == 1 + 1  # lg worker (now its small supervisor) and the one celery worker
        assert "lg_workers._supervisor" in (Path("/proc") / str(worker.pid) / "cmdline").read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
        assert processes & live_pids() == set()
    finally:
        if worker.poll() is None:
            worker.kill()


@pytest.mark.slow
@pytest.mark.distributed
def test_lg_scheduler_runs_until_sigterm(tmp_path, pg_url, redis_url):
    log = tmp_path / "scheduler.log"
    with log.open("w") as handle:
        scheduler = subprocess.Popen(
            [*LG, "scheduler", "--interval", "0.2", "--store", pg_url, "--broker", redis_url],
            env=lg_env(),
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(log, "a recovery pass every 0.2 s", scheduler)
        scheduler.send_signal(signal.SIGTERM)
        assert scheduler.wait(timeout=30) == 0
        assert "scheduler: stopped" in log.read_text()
    finally:
        if scheduler.poll() is None:
            scheduler.kill()


def test_lg_worker_rejects_bad_settings(tmp_path):
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    cases = [
        (["--queues", "lg.orchestrate,lg.nope"], "unknown queue(s) ['lg.nope']"),
        (["--queues", " , "], "--queues is empty"),
        (["--store", store], "lg worker needs a broker"),
        (["--broker", "redis://127.0.0.1:1/0"], "needs a run store shared"),
        (["--store", "not a url", "--broker", "redis://127.0.0.1:1/0"], "is not a database URL"),
        (
            ["--store", store, "--broker", "redis://127.0.0.1:1/0", "--import", "no_such_module"],
            "cannot import module 'no_such_module'",
        ),
        # not Redis: Celery could not start, and `lg worker` restarted it with a traceback forever
        (
            ["--store", store, "--broker", "amqp://127.0.0.1:1//"],
            "broker_url: 'amqp://127.0.0.1:1//' is not a Redis URL",
        ),
    ]
    for args, message in cases:
        result = lg("worker", *args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert message in " ".join(result.stderr.split()), (args, result.stderr)
        assert "Traceback" not in result.stderr
    for args in (["--pool", "gevent"], ["--concurrency", "0"], ["--loglevel", "LOUD"]):
        result = lg("worker", *args, cwd=tmp_path)
        assert result.returncode == 2, args
        assert "Invalid value" in result.stderr


def test_lg_scheduler_rejects_bad_settings(tmp_path):
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    (tmp_path / "runs.db").touch()
    no_broker = lg("scheduler", "--store", store, cwd=tmp_path)
    assert no_broker.returncode == 2
    assert "lg scheduler needs the workers' broker" in no_broker.stderr
    in_memory = lg("scheduler", "--broker", "redis://127.0.0.1:1/0", cwd=tmp_path)
    assert in_memory.returncode == 2
    assert "no run store configured" in in_memory.stderr
    not_redis = lg("scheduler", "--store", store, "--broker", "http://127.0.0.1:1", cwd=tmp_path)
    assert not_redis.returncode == 2
    assert "is not a Redis URL" in not_redis.stderr and "Traceback" not in not_redis.stderr
    interval = lg("scheduler", "--interval", "0", cwd=tmp_path)
    assert interval.returncode == 2
    assert "Invalid value" in interval.stderr


MALFORMED_REDIS_URLS = [
    ("redis://127.0.0.1:abc/0", "Port could not be cast to integer"),
    ("redis://[::1/0", "Invalid IPv6 URL"),
    ("redis://127.0.0.1:6379/zero", "database"),
]


def _refused_worker_stderr(tmp_path, broker: str) -> str:
    """Run `lg worker --broker BROKER`, expect it to refuse (exit 2) before Celery starts; its stderr."""
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    worker = subprocess.Popen(
        [*LG, "worker", "--queues", "lg.model", "--store", store, "--broker", broker],
        cwd=tmp_path,
        env=lg_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _out, err = worker.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)  # the Celery workers too
        worker.communicate()
        raise AssertionError(f"lg worker --broker {broker} started Celery instead of refusing it") from None
    assert worker.returncode == 2, err
    return err


@pytest.mark.parametrize(("broker", "reason"), MALFORMED_REDIS_URLS)
def test_lg_worker_refuses_a_malformed_redis_url_before_starting_celery(tmp_path, broker, reason):
    """Celery could not parse it, and `lg worker` restarted it with a traceback forever."""
    err = _refused_worker_stderr(tmp_path, broker)
    assert "is not a valid Redis URL" in err and reason in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(("broker", "reason"), MALFORMED_REDIS_URLS)
def test_lg_scheduler_refuses_a_malformed_redis_url(tmp_path, broker, reason):
    (tmp_path / "runs.db").touch()
    result = lg(
        "scheduler", "--store", f"sqlite:///{tmp_path / 'runs.db'}", "--broker", broker, cwd=tmp_path, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "is not a valid Redis URL" in result.stderr and reason in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_lg_scheduler_refuses_a_broker_it_cannot_reach(tmp_path):
    """It exits 2 at start naming the broker, instead of sweeping while nothing it relays can arrive."""
    (tmp_path / "runs.db").touch()
    result = lg(
        "scheduler",
        "--store",
        f"sqlite:///{tmp_path / 'runs.db'}",
        "--broker",
        "redis://127.0.0.1:1/0",
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]  # after the store's INFO log lines
    assert last.startswith("error: cannot reach the broker at redis://127.0.0.1:1/0"), result.stderr
    assert "Traceback" not in result.stderr


def test_lg_worker_refuses_a_broker_it_cannot_reach(tmp_path):
    """Celery retried the connection for minutes, then `lg worker` restarted it, forever."""
    err = _refused_worker_stderr(tmp_path, "redis://127.0.0.1:1/0")
    assert err.startswith("error: cannot reach the broker at redis://127.0.0.1:1/0"), err


def test_a_bad_lg_yaml_is_one_line_naming_the_key(tmp_path):
    (tmp_path / "lg.yaml").write_text("broker_url: redis://127.0.0.1:1/0\nlease_seconds: -3\n")
    result = lg("worker", cwd=tmp_path)
    assert result.returncode == 2
    assert "lease_seconds (in config file" in result.stderr and "greater than 0" in result.stderr
    (tmp_path / "lg.yaml").write_text("brokr_url: redis://127.0.0.1:1/0\n")
    result = lg("scheduler", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown setting 'brokr_url'" in result.stderr


def test_a_worker_running_as_root_says_why_celerys_root_warning_does_not_apply(monkeypatch):
    from lg_workers._root_notice import root_notice

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "getuid", lambda: 0)
    notice = root_notice(["json"])
    assert notice is not None and "accepts only json messages" in notice and "\n" not in notice
    assert root_notice(["json", "pickle"]) is None  # Celery's own check (and refusal) applies
    for call in ("getuid", "geteuid", "getgid", "getegid"):
        monkeypatch.setattr(os, call, lambda: 1000)
    assert root_notice(["json"]) is None
