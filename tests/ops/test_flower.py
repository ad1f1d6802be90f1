"""Flower on the local stack shows a run's tasks by name, state and run id, and no prompt or user data.

Task arguments are ids only ([run_id, step_key]) and results are short outcome
strings, so Flower and the broker never see content. The
screenshot is taken by Debian's Chromium driven through Playwright.
"""

from __future__ import annotations

import ast
import base64
import json
import sys
import urllib.request

import pytest
from PIL import Image

from lg_core import Configuration, with_configuration
from lg_scheduler.stack.stack import WORKER_SERVICES
from tests.ops.support import DIST_APP_DIR, wait_until

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


def get_json(url: str, basic_auth: str):
    """GET ``url`` as Flower's user (``basic_auth`` is ``user:password``, FLOWER_BASIC_AUTH of the env file)."""
    request = urllib.request.Request(
        url, headers={"Authorization": "Basic " + base64.b64encode(basic_auth.encode()).decode()}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def task_of(step_key: str) -> str:
    return TASK_FOR_STEP["tool" if "/tool/" in step_key else "model"]


def test_flower_shows_the_tasks_of_a_run_without_its_content(stack, tmp_path):
    up = stack.up("--import", "dist_app")
    assert up.returncode == 0, up.stderr
    env, flower = stack.env(), f"http://127.0.0.1:{stack.ports['flower']}"
    auth = env["FLOWER_BASIC_AUTH"]
    # Flower only knows tasks whose events it received: wait until it hears every worker.
    wait_until(lambda: len(get_json(f"{flower}/workers?json=1", auth)["data"]) >= len(WORKER_SERVICES), what="workers")

    sys.path.insert(0, str(DIST_APP_DIR))
    import dist_app

    config = Configuration(run_store=env["LG_RUN_STORE"], broker_url=env["LG_BROKER_URL"])
    with with_configuration(config):
        run = dist_app.StepAgent.start_execution(SECRET).wait(timeout=120)
        assert run.completed, run.error
        config.runtime().backend.advance(run.id)  # the recovery task, so Flower shows lg.advance too
        steps = {s.key for s in config.runtime().store.load_steps(run.id)} - {"root/start"}
    config.close()
    assert steps

    def run_tasks():
        tasks = [t for t in get_json(f"{flower}/api/tasks?limit=1000", auth).values() if run.id in (t["args"] or "")]
        keys = {ast.literal_eval(t["args"])[1] for t in tasks if t["name"] != "lg.advance"}
        done = keys == steps and any(t["name"] == "lg.advance" for t in tasks)
        return tasks if done and all(t["state"] == "SUCCESS" for t in tasks) else None

    tasks = wait_until(run_tasks, what="every task of the run to succeed in Flower")
    for task in tasks:
        args = ast.literal_eval(task["args"])
        if task["name"] == "lg.advance":
            assert args == [run.id]
        else:
            assert args == [run.id, args[1]] and args[1] in steps
            assert task["name"] == task_of(args[1])
        assert ast.literal_eval(task["kwargs"]) == {}
        assert len(ast.literal_eval(task["result"])) <= 40  # a short outcome, e.g. 'executed'
    assert sum(t["name"] == "lg.model_turn" for t in tasks) == dist_app.TURNS + 1
    dump = json.dumps(tasks)
    # "4242 4242", not "4242": task uuids, pids and timestamps may contain four digits by chance.
    for content in (SECRET, "4242 4242", "Lovelace", "All steps recorded", "step 0 done", "Record one numbered step"):
        assert content not in dump

    screenshot, page_text = take_screenshot(f"{flower}/tasks", run.id, tmp_path / "flower-tasks.png", auth)
    assert run.id in page_text and "lg.model_turn" in page_text and "SUCCESS" in page_text
    assert "Lovelace" not in page_text
    with Image.open(screenshot) as image:
        image.verify()
    with Image.open(screenshot) as image:
        assert image.format == "PNG" and image.width >= 1200 and image.height >= 600
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 50  # text, badges and table rules, not a blank page


def take_screenshot(url: str, run_id: str, path, basic_auth: str):
    from playwright.sync_api import sync_playwright

    user, _, password = basic_auth.partition(":")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        try:
            page = browser.new_page(
                viewport={"width": 1600, "height": 1000}, http_credentials={"username": user, "password": password}
            )
            page.goto(url)
            page.fill("input[type=search]", run_id)  # the task table's search box: only this run's tasks
            page.wait_for_selector("td:has-text('lg.model_turn')", timeout=30_000)
            page.wait_for_selector("td:has-text('lg.tool_call')", timeout=30_000)
            page.screenshot(path=str(path), full_page=True)
            return path, page.inner_text("body")
        finally:
            browser.close()
