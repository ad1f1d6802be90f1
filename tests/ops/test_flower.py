"""Flower on the local stack tells an operator the truth about runs, and shows no content.

Driven in Debian's headless Chromium (through Playwright) and through Flower's
API, on one `lg stack` with its scheduler:

* a completed run's tasks are listed by name and state, each row showing its
  run and step (and a tool call its tool), with ids-only arguments and short
  results, and no prompt or user data anywhere;
* a run the provider fails has its model turn listed as FAILURE, saying
  ``run failed: HTTPError`` and nothing of the provider's text;
* a worker SIGKILLed while it holds a tool call leaves no task STARTED once the
  scheduler has re-sent the step: the dead task is FAILURE with WorkerLostError;
* worker names say which queues they serve.

Screenshots of each page are kept under ``test-artifacts/flower`` (or
``$LG_TEST_ARTIFACTS/flower``) for a person to look at.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

from lg_core import Configuration, with_configuration
from lg_scheduler.stack.stack import WORKER_SERVICES
from tests.ops.support import DIST_APP_DIR, lg, lg_env, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

SECRET = "Charge card 4242 4242 4242 4242 for Ada Lovelace, 12 Crescent Road"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TASK_FOR_STEP = {"model": "lg.model_turn", "tool": "lg.tool_call"}
ARTIFACTS = Path(os.environ.get("LG_TEST_ARTIFACTS") or Path(__file__).parents[2] / "test-artifacts") / "flower"


def get_json(url: str, basic_auth: str):
    """GET ``url`` as Flower's user (``basic_auth`` is ``user:password``, FLOWER_BASIC_AUTH of the env file)."""
    request = urllib.request.Request(
        url, headers={"Authorization": "Basic " + base64.b64encode(basic_auth.encode()).decode()}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def shown(args: str) -> dict[str, str]:
    """A row's display arguments, ``run=... step=... tool=...``, as a dict."""
    return dict(part.split("=", 1) for part in args.split())


class Flower:
    def __init__(self, url: str, auth: str) -> None:
        self.url, self.auth = url, auth

    def tasks_of(self, run_id: str) -> list[dict]:
        tasks = get_json(f"{self.url}/api/tasks?limit=5000", self.auth)
        return [dict(task, uuid=uuid) for uuid, task in tasks.items() if run_id in (task["args"] or "")]

    def workers(self) -> list[str]:
        return [worker["hostname"] for worker in get_json(f"{self.url}/workers?json=1", self.auth)["data"]]


@pytest.fixture
def flower_stack(stack, tmp_path):
    """A stack whose tools worker hangs at the charge tool's call 1 (once), and its Flower."""
    ready = tmp_path / "ready"
    ready.mkdir()
    env = lg_env(DIST_APP_HANG="charge:1", DIST_APP_HANG_ONCE="1", DIST_APP_READY_DIR=str(ready))
    ports = [f"--{name}-port={port}" for name, port in stack.ports.items()]
    up = lg("stack", "up", "--dir", str(stack.root), *ports, "--concurrency", "1", "--import", "dist_app", env=env)
    assert up.returncode == 0, up.stderr
    stack_env = stack.env()
    flower = Flower(f"http://127.0.0.1:{stack.ports['flower']}", stack_env["FLOWER_BASIC_AUTH"])
    # Flower only knows tasks whose events it received: wait until it hears every worker.
    wait_until(lambda: len(flower.workers()) >= len(WORKER_SERVICES), what="workers in Flower")
    sys.path.insert(0, str(DIST_APP_DIR))
    config = Configuration(run_store=stack_env["LG_RUN_STORE"], broker_url=stack_env["LG_BROKER_URL"])
    with with_configuration(config):
        yield flower, config, ready
    config.close()


def test_flower_shows_runs_as_they_are(flower_stack):
    import dist_app

    flower, config, ready = flower_stack
    names = flower.workers()
    for queue in WORKER_SERVICES.values():
        assert any(name.startswith(f"lg-{queue.removeprefix('lg.')}@") for name in names), names

    completed = dist_app.StepAgent.start_execution(SECRET).wait(timeout=120)
    assert completed.completed, completed.error
    check_completed_run(flower, config, completed)
    screenshot(flower, completed.id, "completed-run.png", "SUCCESS")

    failed = dist_app.FailingAgent.start_execution(SECRET).wait(timeout=120)
    assert failed.failed
    check_failed_run(flower, failed)
    screenshot(flower, failed.id, "failed-run.png", "FAILURE")

    killed = kill_worker_mid_run(dist_app, ready)
    check_killed_worker_tasks(flower, killed)
    screenshot(flower, killed.id, "killed-worker.png", "FAILURE")

    dump = json.dumps([flower.tasks_of(run.id) for run in (completed, failed, killed)])
    # "4242 4242", not "4242": task uuids, pids and timestamps may contain four digits by chance.
    for content in (SECRET, "4242 4242", "Lovelace", "upstream broke", "All steps recorded", "step 0 done"):
        assert content not in dump


def check_completed_run(flower: Flower, config: Configuration, run) -> None:
    config.runtime().distributed_backend().advance(run.id)  # the recovery task, so Flower shows lg.advance too
    steps = {s.key for s in config.runtime().store.load_steps(run.id)} - {"root/start"}

    def every_task_succeeded():
        tasks = flower.tasks_of(run.id)
        keys = {shown(t["args"])["step"] for t in tasks if t["name"] != "lg.advance"}
        done = keys == steps and any(t["name"] == "lg.advance" for t in tasks)
        return tasks if done and all(t["state"] == "SUCCESS" for t in tasks) else None

    tasks = wait_until(every_task_succeeded, what="every task of the completed run to succeed in Flower")
    for task in tasks:
        assert json.loads(task["kwargs"].replace("'", '"')) == {}
        if task["name"] == "lg.advance":
            assert task["args"] == repr([run.id])
            continue
        row = shown(task["args"])
        assert row["run"] == run.id and row["step"] in steps
        assert task["name"] == TASK_FOR_STEP["tool" if "/tool/" in row["step"] else "model"]
        assert row.get("tool") == ("step" if task["name"] == "lg.tool_call" else None)
        assert len(task["result"]) <= 40  # a short outcome, e.g. 'executed'
    assert sum(t["name"] == "lg.model_turn" for t in tasks) == dist_app_turns() + 1
    assert any("run completed" in t["result"] for t in tasks)  # the last turn says how the run ended


def dist_app_turns() -> int:
    import dist_app

    return dist_app.TURNS


def check_failed_run(flower: Flower, run) -> None:
    def failed_turn():
        tasks = flower.tasks_of(run.id)
        return [t for t in tasks if t["state"] == "FAILURE"] or None

    (task,) = wait_until(failed_turn, what="the failed run's model turn to be FAILURE in Flower")
    assert task["name"] == "lg.model_turn" and shown(task["args"])["step"] == "root/turn-0/model"
    assert "RunFailed" in task["exception"] and "run failed: HTTPError" in task["exception"]
    assert "upstream broke" not in task["exception"]


def kill_worker_mid_run(dist_app, ready: Path):
    """Start a charging run, SIGKILL the tools worker while it holds charge call 1, wait for the run to end."""
    execution = dist_app.ChargeAgent.start_execution(SECRET)
    marker = wait_until(lambda: next(ready.glob("charge-1-*"), None), what="the tools worker to hold charge 1")
    os.kill(int(marker.read_text()), signal.SIGKILL)
    run = execution.wait(timeout=180)  # the scheduler re-sends the step; the supervisor restarts the worker
    assert run.completed, run.error
    return run


def check_killed_worker_tasks(flower: Flower, run) -> None:
    def charge_1_rows():
        tasks = [t for t in flower.tasks_of(run.id) if shown(t["args"])["step"].endswith("/tool/" + charge_1_call(run))]
        states = sorted(t["state"] for t in tasks)
        return tasks if states == ["FAILURE", "SUCCESS"] else None

    tasks = wait_until(charge_1_rows, timeout=120, what="the dead worker's task to end in Flower")
    lost = next(t for t in tasks if t["state"] == "FAILURE")
    assert "WorkerLostError" in lost["exception"] and lost["worker"].startswith("lg-tools@")
    assert shown(lost["args"])["tool"] == "charge"
    assert not [t for t in flower.tasks_of(run.id) if t["state"] in ("STARTED", "RECEIVED")]


def charge_1_call(run) -> str:
    """The call id of the run's second charge call (the one the killed worker held)."""
    from lg_core import current_runtime

    keys = sorted(s.key for s in current_runtime().store.load_steps(run.id) if s.key.startswith("root/turn-1/tool/"))
    return keys[0].rsplit("/", 1)[1]


def screenshot(flower: Flower, run_id: str, name: str, state: str) -> None:
    """Flower's task page filtered to ``run_id``, in headless Chromium, kept as ``name``; checked not blank."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    user, _, password = flower.auth.partition(":")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        try:
            page = browser.new_page(
                viewport={"width": 1600, "height": 1000}, http_credentials={"username": user, "password": password}
            )
            page.goto(f"{flower.url}/tasks")
            page.fill("input[type=search]", run_id)  # the task table's search box: only this run's tasks
            page.wait_for_selector(f"td:has-text('{state}')", timeout=30_000)
            page.screenshot(path=str(path), full_page=True)
            text = page.inner_text("body")
        finally:
            browser.close()
    assert run_id in text and state in text and "Lovelace" not in text
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width >= 1200 and image.height >= 600
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 50  # text, badges and table rules, not a blank page
