"""`lg stack`: one command brings up Redis, PostgreSQL, workers, scheduler and Flower; runs complete on it."""

from __future__ import annotations

import os
import sys

import pytest

from lg_core import Configuration, with_configuration
from lg_scheduler.stack.stack import SERVICES
from lg_workers._root_notice import CELERY_ROOT_WARNING
from tests.ops.support import DIST_APP_DIR, Stack, descendants, lg, live_pids

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def run_step_agent(env: dict[str, str], prompt: str):
    sys.path.insert(0, str(DIST_APP_DIR))
    import dist_app

    config = Configuration(run_store=env["LG_RUN_STORE"], broker_url=env["LG_BROKER_URL"])
    with with_configuration(config):
        try:
            return dist_app.StepAgent.start_execution(prompt).wait(timeout=120)
        finally:
            config.close()


def test_stack_up_runs_an_agent_then_down_stops_every_process(stack):
    up = stack.up("--import", "dist_app")
    assert up.returncode == 0, up.stderr
    env = stack.env()
    assert env["LG_IMPORTS"] == "dist_app"
    assert f"127.0.0.1:{stack.ports['postgres']}" in env["LG_RUN_STORE"]
    assert f"http://127.0.0.1:{stack.ports['flower']}" in up.stdout

    status = stack.run("status")
    assert status.returncode == 0, status.stdout
    assert all(f"{name}" in status.stdout for name in SERVICES)
    assert "dead" not in status.stdout

    logs = stack.run("logs", "worker-model")
    assert logs.returncode == 0 and " ready." in logs.stdout
    # Celery's multi-line root warning is replaced by one line saying why it does not apply
    assert CELERY_ROOT_WARNING not in logs.stdout and "superuser privileges" not in logs.stdout
    if os.geteuid() == 0:
        assert logs.stdout.count("lg worker: running as root;") == 1, logs.stdout

    run = run_step_agent(env, "Record every step.")
    assert run.completed, run.error
    assert run.response == "All steps recorded."

    pids = stack.pids()
    assert set(pids) == set(SERVICES)
    again = stack.up()
    assert again.returncode == 0, again.stderr
    assert "already running: " + ", ".join(SERVICES) in again.stderr
    assert stack.pids() == pids  # nothing started twice

    processes = set().union(*(descendants(pid) for pid in pids.values()))
    assert len(processes) > len(SERVICES)  # pool children, celery workers under `lg worker`, postgres backends
    down = stack.run("down")
    assert down.returncode == 0, down.stderr
    assert processes & live_pids() == set()
    stopped = stack.run("status")
    assert stopped.returncode == 1
    assert "alive" not in stopped.stdout

    # up after down keeps the data: the finished run is still in the store; --import adds to the kept imports
    assert stack.up("--import", "json").returncode == 0
    assert stack.env()["LG_IMPORTS"] == "dist_app,json"
    listed = lg("runs", "list", "--store", env["LG_RUN_STORE"])
    assert run.id in listed.stdout, listed.stderr


def test_down_also_stops_the_orphans_of_a_killed_worker(stack):
    import os
    import signal

    up = stack.up("--import", "dist_app")
    assert up.returncode == 0, up.stderr
    leader = stack.pids()["worker-tools"]
    orphans = descendants(leader) - {leader}
    assert orphans  # the celery worker and its pool child
    os.kill(leader, signal.SIGKILL)
    status = stack.run("status")
    assert status.returncode == 1
    assert "orphaned" in status.stdout
    assert stack.run("down").returncode == 0
    assert orphans & live_pids() == set()


def test_a_stack_running_elsewhere_is_named_by_status_and_up_in_another_directory(stack, tmp_path):
    """`status` where no stack was started leads with that and names the directory of the running stack;
    `up` there warns of the running stack before it starts (here it then stops: the ports are taken)."""
    import subprocess

    from tests.ops.support import LG, lg_env

    up = stack.up("--import", "dist_app")
    assert up.returncode == 0, up.stderr
    other = tmp_path / "other"
    status = subprocess.run(
        [*LG, "stack", "status", "--dir", str(other)],
        env=lg_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    assert status.returncode == 1
    first = status.stdout.splitlines()[0]
    assert first.startswith(f"no stack was started in {other}; a stack is running in "), status.stdout
    assert str(stack.root) in first
    second = Stack(other, stack.ports).up()
    assert second.returncode == 1, second.stderr
    assert f"warning: a stack is already running in {stack.root}" in second.stderr.splitlines()[0], second.stderr
    assert Stack(other, stack.ports).pids() == {}


def test_stack_cli_rejects_bad_input(tmp_path):
    import subprocess

    from tests.ops.support import LG

    empty = str(tmp_path / "never-started")
    unknown = lg("stack", "logs", "nope", "--dir", empty)
    assert unknown.returncode == 2
    assert "no stack process named 'nope'" in unknown.stderr and "worker-model" in unknown.stderr

    missing = lg("stack", "logs", "worker-model", "--dir", empty)
    assert missing.returncode == 2
    assert "never started" in missing.stderr

    status = lg("stack", "status", "--dir", empty)
    assert status.returncode == 1
    assert "stopped" in status.stdout
    assert f"no stack was started in {empty}" in status.stderr and "or pass --dir" in status.stderr
    merged = subprocess.run(  # the hint leads, before the table of stopped processes
        [*LG, "stack", "status", "--dir", empty], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert merged.stdout.splitlines()[0].startswith(f"no stack was started in {empty}"), merged.stdout

    down = lg("stack", "down", "--dir", empty)
    assert down.returncode == 0
    assert "nothing was running" in down.stderr

    # `lg stack down` in another directory than `up` ran in names the directory it looked in,
    # so a stack running elsewhere is not mistaken for no stack at all.
    elsewhere = lg("stack", "down", cwd=tmp_path)
    assert elsewhere.returncode == 0
    assert f"nothing was running in {tmp_path / '.lg' / 'stack'}: no stack was started there" in elsewhere.stderr
    assert "where you ran `lg stack up`, or pass --dir" in elsewhere.stderr

    for bad in (["--redis-port", "0"], ["--concurrency", "0"], ["--flower-port", "70000"]):
        result = lg("stack", "up", "--dir", empty, *bad)
        assert result.returncode == 2, bad
        assert "Invalid value" in result.stderr

    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "stack.json").write_text("{not json")
    damaged = lg("stack", "up", "--dir", str(tmp_path / "damaged"))
    assert damaged.returncode == 2
    assert "stack.json is damaged" in damaged.stderr

    # A --dir that cannot be created is a usage error (exit 2), not a FileNotFoundError or
    # NotADirectoryError traceback.
    (tmp_path / "afile").write_text("")
    for unusable in ("/proc/nope", str(tmp_path / "afile" / "sub")):
        result = lg("stack", "up", "--dir", unusable)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: cannot create the stack directory {unusable}"), lines


def test_stack_up_with_an_unimportable_module_starts_nothing(stack):
    """The import is checked before Redis and PostgreSQL start, and the bad module is not kept in
    stack.json for a later `up`."""
    up = stack.up("--import", "no_such_module")
    assert up.returncode == 2, up.stderr
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot import module 'no_such_module'"), up.stderr
    assert "nothing was started" in lines[0]
    assert stack.pids() == {}
    assert not (stack.root / "stack.json").exists()


def test_a_running_stack_refuses_new_settings_and_is_found_without_stack_json(stack):
    """Four faults of one running stack, in a directory whose path has a space.

    `up` with other settings (`--import`, `--concurrency`) is refused in one line naming the
    `down` command, and changes nothing in env or stack.json; the printed `. ENV_FILE` is
    shell-quoted; without stack.json `status` and `up` still find the running stack (`up`
    refuses, starting nothing beside it); and with a damaged stack.json `down` stops every
    process.
    """
    import subprocess

    spaced = Stack(stack.root.parent / "my stack", stack.ports)
    quoted_down = f"lg stack down --dir '{spaced.root}'"
    try:
        up = spaced.up("--import", "dist_app")
        assert up.returncode == 0, up.stderr
        sourced = subprocess.run(
            ["bash", "-c", f"{up.stdout.split('(source it: ')[1].split(')')[0]} && echo $LG_BROKER_URL"],
            capture_output=True,
            text=True,
        )
        assert sourced.stdout.strip() == spaced.env()["LG_BROKER_URL"], sourced.stderr
        assert sourced.stdout.strip().endswith(f"@127.0.0.1:{stack.ports['redis']}/0")
        state = (spaced.root / "stack.json").read_text()
        env = (spaced.root / "env").read_text()

        for change, what in ((["--import", "json"], "--import"), (["--concurrency", "2"], "--concurrency")):
            refused = spaced.run("up", *change)
            assert refused.returncode == 2, refused.stderr
            lines = refused.stderr.strip().splitlines()
            assert len(lines) == 1 and quoted_down in lines[0] and f"before changing {what}" in lines[0], lines
            assert (spaced.root / "stack.json").read_text() == state
            assert (spaced.root / "env").read_text() == env

        pids = spaced.pids()
        processes = set().union(*(descendants(pid) for pid in pids.values()))
        (spaced.root / "stack.json").unlink()
        status = spaced.run("status")
        assert status.returncode == 0 and "dead" not in status.stdout, status.stdout
        assert "no stack was started" not in status.stderr and quoted_down in status.stderr, status.stderr

        again = spaced.up()
        assert again.returncode == 2, again.stderr
        lines = again.stderr.strip().splitlines()
        assert len(lines) == 1 and "stack.json is missing" in lines[0] and quoted_down in lines[0], lines
        assert not (spaced.root / "stack.json").exists()
        assert spaced.pids() == pids

        (spaced.root / "stack.json").write_text("{not json")
        down = spaced.run("down")
        assert down.returncode == 0, down.stderr
        assert "stack stopped" in down.stderr
        assert processes & live_pids() == set()
    finally:
        spaced.run("down")


def test_a_busy_port_is_refused_before_anything_is_started_or_saved(stack):
    """`up` with the Redis port taken starts nothing, saves nothing in stack.json (so a later plain
    `up` is not held to that port) and says that no stack process is running; ports kept in
    stack.json are named as kept from the last `up`."""
    import json
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", stack.ports["redis"]))
        busy.listen()
        asked = stack.up()
        assert asked.returncode == 1
        assert f"port {stack.ports['redis']} for redis" in asked.stderr
        assert "did start" not in asked.stderr and "pass --redis-port" not in asked.stderr, asked.stderr
        assert "another --redis-port" in asked.stderr and "no stack process is running" in asked.stderr
        assert not (stack.root / "stack.json").exists()
        assert stack.pids() == {}

        saved = {"ports": stack.ports, "imports": [], "concurrency": 1, "postgres_root": None}
        (stack.root / "stack.json").write_text(json.dumps(saved))
        kept = stack.run("up")
        assert kept.returncode == 1
        assert "kept from the last `lg stack up`" in kept.stderr and "pass --redis-port" in kept.stderr, kept.stderr
        assert json.loads((stack.root / "stack.json").read_text()) == saved
        assert stack.pids() == {}


def test_stack_up_import_adds_to_the_kept_imports_and_checks_them_all(stack):
    """`--import` adds to the imports stack.json keeps, so a kept module that no longer imports is
    still checked (and named as kept) before anything starts."""
    import json

    saved = {"ports": stack.ports, "imports": ["no_such_kept_module"], "concurrency": 1, "postgres_root": None}
    (stack.root).mkdir(parents=True)
    (stack.root / "stack.json").write_text(json.dumps(saved))
    up = stack.run("up", "--import", "json")
    assert up.returncode == 2, up.stderr
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot import module 'no_such_kept_module'" in lines[0], up.stderr
    assert "kept from an earlier `lg stack up`" in lines[0] and "nothing was started" in lines[0]
    assert stack.pids() == {}
    assert json.loads((stack.root / "stack.json").read_text()) == saved


def test_stack_logs_follow_prints_appended_lines_until_ctrl_c(tmp_path):
    """`lg stack logs -f` prints the last lines, then each line as it is written, and ends on Ctrl-C (exit 0)."""
    import signal
    import subprocess

    from tests.ops.support import LG, lg_env, wait_until

    logs = tmp_path / "stack" / "logs"
    logs.mkdir(parents=True)
    log = logs / "worker-model.log"
    log.write_text("before\n")
    follower = subprocess.Popen(
        [*LG, "stack", "logs", "worker-model", "--follow", "--dir", str(tmp_path / "stack")],
        env=lg_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen: list[str] = []
        wait_until(lambda: seen.append(follower.stdout.readline()) or "before\n" in seen, 30, "the last lines")
        with log.open("a") as handle:
            handle.write("after one\nafter")
            handle.flush()
            wait_until(lambda: seen.append(follower.stdout.readline()) or "after one\n" in seen, 30, "a new line")
            handle.write(" two\n")
        wait_until(lambda: seen.append(follower.stdout.readline()) or "after two\n" in seen, 30, "a completed line")
        follower.send_signal(signal.SIGINT)
        assert follower.wait(timeout=30) == 0
        assert "Traceback" not in follower.stderr.read()
    finally:
        follower.kill()


def test_a_run_stack_workers_cannot_import_says_where_they_import_code_from(stack, tmp_path, monkeypatch):
    """A run of an agent only the client can import fails on the stack's workers with how those workers get
    application code (the directory `lg stack up` ran in, or PYTHONPATH), not `lg worker --import`."""
    import textwrap
    import uuid

    from tests.ops.support import lg_env

    module = f"client_only_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(
            """
            from lg_core import Agent

            class OnlyOnTheClientAgent(Agent):
                model = "scripted:echo"
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    agent = __import__(module).OnlyOnTheClientAgent
    ports = [f"--{name}-port={port}" for name, port in stack.ports.items()]
    up = lg("stack", "up", "--dir", str(stack.root), *ports, "-c", "1", env=lg_env(LG_MAX_STEP_ATTEMPTS="1"))
    assert up.returncode == 0, up.stderr
    env = stack.env()
    config = Configuration(run_store=env["LG_RUN_STORE"], broker_url=env["LG_BROKER_URL"])
    with with_configuration(config):
        try:
            run = agent.start_execution("Hello").wait(timeout=120)
        finally:
            config.close()
    assert run.failed, run
    message = str(run.error)
    assert "import application code from the directory `lg stack up` ran in" in message, message
    assert module in message and "lg worker --import" not in message
