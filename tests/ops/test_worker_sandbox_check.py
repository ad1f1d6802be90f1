"""`lg worker` refuses to start when the sandbox backend its queues need cannot run on this host."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from lg_core.errors import DependencyError
from lg_scheduler.stack.servers import RedisServer
from lg_workers.sandbox_check import check_sandbox, required_backend
from tests.ops.support import LG, lg_env

MISSING_BWRAP = {"provider": "bubblewrap", "bubblewrap": "/nonexistent/bwrap"}


@pytest.mark.parametrize(
    ("setting", "queues", "expected"),
    [
        (None, ["lg.sandbox"], ("native", {})),
        ({"provider": "bubblewrap", "host_user": 65534}, ["lg.sandbox"], ("bubblewrap", {"host_user": 65534})),
        (MISSING_BWRAP, ["lg.tools"], ("bubblewrap", {"executable": "/nonexistent/bwrap"})),
        ({"provider": "unrestricted"}, ["lg.tools"], None),
        ({"provider": "unrestricted"}, ["lg.sandbox"], ("unrestricted", {})),
        (None, ["lg.orchestrate", "lg.model", "lg.tools"], None),
        (lambda workspace: None, ["lg.tools"], None),
        (lambda workspace: None, ["lg.sandbox"], ("native", {})),
    ],
)
def test_the_backend_a_worker_needs_follows_its_queues_and_the_sandbox_setting(setting, queues, expected):
    assert required_backend(setting, queues) == expected


def test_an_unavailable_backend_is_a_dependency_error_naming_the_queue_and_the_reason():
    with pytest.raises(
        DependencyError, match=r"serves lg.sandbox, .* bubblewrap is not installed at /nonexistent/bwrap"
    ):
        check_sandbox(MISSING_BWRAP, ["lg.sandbox"])
    check_sandbox(MISSING_BWRAP, ["lg.model"])  # a model worker never opens a sandbox


@pytest.fixture
def redis_url():
    server = RedisServer().start()
    yield server.url
    server.stop()


def test_lg_worker_serving_lg_sandbox_refuses_to_start_without_its_backend(tmp_path, redis_url):
    (tmp_path / "lg.yaml").write_text(
        f"run_store: sqlite:///{tmp_path / 'runs.db'}\nbroker_url: {redis_url}\n"
        f"workspace: {{root: '{tmp_path}/runs/{{run_id}}'}}\n"
        "sandbox: {provider: bubblewrap, bubblewrap: /nonexistent/bwrap, files: {root: read_write}}\n"
    )
    worker = subprocess.Popen(
        [*LG, "worker", "--queues", "lg.sandbox"],
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
        raise AssertionError("lg worker started Celery without the sandbox backend") from None
    assert worker.returncode == 2, err
    message = " ".join(err.split())
    assert "lg worker serves lg.sandbox, whose steps run in the bubblewrap sandbox" in message, err
    assert "bubblewrap is not installed at /nonexistent/bwrap" in message, err
    assert "Traceback" not in err
