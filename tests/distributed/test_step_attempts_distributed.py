"""A step that fails on every worker ends its run instead of being retried forever.

The common way to get there: a web app starts runs of an agent the workers
cannot import (deployed without the module, or started without `--import`).
Before the attempt limit, each worker failed to import it, the scheduler sent
the step again every lease, and the run stayed `running` for ever.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
import uuid

from lg_core import retry
from lg_scheduler.scheduler import Scheduler

APP = """
from lg_core import Agent
from lg_core.providers import scripted

scripted.register("poison-echo", lambda request: {"text": "imported at last"})


class OnlyOnTheClientAgent(Agent):
    model = "scripted:poison-echo"
"""


def test_a_run_workers_cannot_import_fails_after_its_attempts_and_retries_once_fixed(
    dist, tmp_path, monkeypatch, caplog
):
    module = f"client_only_{uuid.uuid4().hex[:8]}"
    app_dir = tmp_path / "client_only"
    app_dir.mkdir()
    (app_dir / f"{module}.py").write_text(textwrap.dedent(APP))
    monkeypatch.syspath_prepend(str(app_dir))
    agent = __import__(module).OnlyOnTheClientAgent
    blind = dist.start_workers(pool="threads", concurrency=4, LG_MAX_STEP_ATTEMPTS="2")
    scheduler = Scheduler(dist.config.runtime())

    execution = agent.start_execution("Hello")
    store = dist.config.runtime().store
    deadline = time.monotonic() + 60
    with caplog.at_level(logging.INFO, logger="lg_scheduler.recovery"):
        while store.load_run(execution.run_id).status == "running":
            assert time.monotonic() < deadline, "the run was still retried after its attempts"
            scheduler.run_once()  # the relay sends the step again once its retry delay passed
            time.sleep(0.2)
    # The relay's log names the failing attempt, not an undelivered message.
    assert f"of run {execution.run_id} (attempt 2; attempt 1 raised RunStateError" in caplog.text
    assert "not delivered" not in caplog.text

    run = execution.wait(timeout=60)
    assert run.failed and type(run.error).__name__ == "RunStateError"
    assert "did not complete in 2 attempts" in str(run.error)
    assert f"lg worker --import {module}" in str(run.error)  # what to do about it
    shown = subprocess.run(
        [sys.executable, "-m", "lg_core.cli", "runs", "show", execution.run_id],
        capture_output=True,
        text=True,
        env=dist.env(),
        timeout=60,
    )
    assert "cannot import the run's entrypoint" in shown.stdout.replace("\n", " ")

    for worker in blind:
        worker.stop()
    dist.start_workers(pool="threads", concurrency=4, PYTHONPATH=f"{app_dir}:{dist.env()['PYTHONPATH']}")
    again = retry(execution.run_id)
    assert again.wait(timeout=60).response == "imported at last"
