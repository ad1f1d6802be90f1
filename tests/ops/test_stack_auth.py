"""`lg stack` on a shared machine: every server refuses a client without the stack's password.

The stack is started with the real ``lg stack up``; the clients are real ones
(a raw Redis connection, psycopg over TCP and over the Unix socket, HTTP to
Flower), and so is the run that shows the stack's own processes use the
passwords.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis

from lg_core import Configuration, with_configuration
from lg_scheduler.stack.servers import PostgresServer
from tests.ops.support import DIST_APP_DIR, descendants, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def passwords_of(env: dict[str, str]) -> dict[str, str]:
    user, _, flower = env["FLOWER_BASIC_AUTH"].partition(":")
    assert user == "lg"
    return {
        "postgres": urlsplit(env["LG_RUN_STORE"]).password or "",
        "redis": urlsplit(env["LG_BROKER_URL"]).password or "",
        "flower": flower,
    }


def redis_answer(port: int, command: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(command)
        return sock.recv(256)


def postgres_refusal(conninfo: str) -> str:
    """The error of a connection that must be refused (an AssertionError if it is let in)."""
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(conninfo, connect_timeout=10).close()
    return str(refused.value)


def flower_status(url: str, basic_auth: str | None = None) -> int:
    headers = {"Authorization": "Basic " + base64.b64encode(basic_auth.encode()).decode()} if basic_auth else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_every_server_refuses_a_client_without_the_password_and_the_stack_runs_with_it(stack, monkeypatch):
    monkeypatch.delenv("PGPASSWORD", raising=False)
    up = stack.up("--import", "dist_app")
    assert up.returncode == 0, up.stderr
    env_file = stack.root / "env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600 and env_file.stat().st_uid == os.geteuid()
    env = stack.env()
    passwords = passwords_of(env)
    assert all(len(value) >= 32 for value in passwords.values()) and len(set(passwords.values())) == 3

    # Printed masked, with where to find them; in no other file of the stack, and in no command line.
    assert f"lg:***@127.0.0.1:{stack.ports['postgres']}" in up.stdout and ":***@127.0.0.1:" in up.stdout
    assert "passwords  in the env file" in up.stdout
    leaks = [
        path
        for path in (stack.root / "stack.json", *(stack.root / "logs").iterdir(), *(stack.root / "pids").iterdir())
        if any(value in path.read_text(errors="replace") for value in passwords.values())
    ]
    assert leaks == []
    assert all(value not in up.stdout + up.stderr for value in passwords.values())
    redis_conf = stack.root / "redis" / "redis.conf"
    assert stat.S_IMODE(redis_conf.stat().st_mode) == 0o600
    for data in (stack.root / "redis", stack.root / "logs"):  # Redis's append-only file holds every key
        assert stat.S_IMODE(data.stat().st_mode) == 0o700, data
    processes = set().union(*(descendants(pid) for pid in stack.pids().values()))
    for pid in processes:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue  # gone meanwhile (a pool child replaced)
        assert not any(value in argv for value in passwords.values()), argv

    # Redis
    port = stack.ports["redis"]
    assert redis_answer(port, b"PING\r\n").startswith(b"-NOAUTH")
    assert redis_answer(port, b"AUTH not-the-password\r\n").startswith(b"-WRONGPASS")
    client = redis.Redis.from_url(env["LG_BROKER_URL"])
    assert client.ping() is True
    client.close()

    # PostgreSQL, over TCP and over its Unix socket
    port = stack.ports["postgres"]
    socket_dir = json.loads((stack.root / "stack.json").read_text())["postgres_root"]
    assert "no password supplied" in postgres_refusal(f"host=127.0.0.1 port={port} user=lg dbname=lg")
    assert "no password supplied" in postgres_refusal(f"host={socket_dir} port={port} user=lg dbname=lg")
    assert "password authentication failed" in postgres_refusal(
        f"host=127.0.0.1 port={port} user=lg dbname=lg password=not-the-password"
    )
    with psycopg.connect(env["LG_RUN_STORE"].replace("+psycopg", ""), connect_timeout=10) as connection:
        assert connection.execute("SELECT current_user").fetchone() == ("lg",)

    # Flower: its API and pages need the password; its broker URL carries Redis's, so it sees the workers
    flower = f"http://127.0.0.1:{stack.ports['flower']}"
    assert flower_status(f"{flower}/api/workers") == 401
    assert flower_status(f"{flower}/api/workers", "lg:not-the-password") == 401
    assert flower_status(f"{flower}/tasks") == 401
    assert flower_status(f"{flower}/api/workers", env["FLOWER_BASIC_AUTH"]) == 200

    def workers():
        request = urllib.request.Request(
            f"{flower}/api/workers?refresh=1",
            headers={"Authorization": "Basic " + base64.b64encode(env["FLOWER_BASIC_AUTH"].encode()).decode()},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    wait_until(workers, what="Flower to see the workers")

    # Workers and scheduler connect with the passwords: a run completes on the stack
    sys.path.insert(0, str(DIST_APP_DIR))
    import dist_app

    config = Configuration(run_store=env["LG_RUN_STORE"], broker_url=env["LG_BROKER_URL"])
    with with_configuration(config):
        try:
            run = dist_app.StepAgent.start_execution("Record every step.").wait(timeout=120)
        finally:
            config.close()
    assert run.completed, run.error


def test_a_stack_made_without_passwords_gets_them_at_its_next_up_and_keeps_its_data(stack, monkeypatch):
    """What an earlier `lg stack up` left: a cluster that trusts every local user, an env file without passwords."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    stack.root.mkdir(parents=True)
    port = stack.ports["postgres"]
    cluster = PostgresServer(root=stack.root / "postgres", port=port, fsync=True)
    cluster.start()
    try:
        url = cluster.create_database("lg")
        with psycopg.connect(url.replace("+psycopg", "")) as connection:  # no password: trusted
            connection.execute("CREATE TABLE kept (note text)")
            connection.execute("INSERT INTO kept VALUES ('from before the passwords')")
    finally:
        cluster.halt()
    (stack.root / "stack.json").write_text(
        json.dumps(
            {"ports": stack.ports, "imports": [], "concurrency": 1, "postgres_root": str(stack.root / "postgres")}
        )
    )
    (stack.root / "logs").mkdir(mode=0o755)
    (stack.root / "logs").chmod(0o755)
    (stack.root / "env").write_text(
        f"export LG_RUN_STORE=postgresql+psycopg://lg@127.0.0.1:{port}/lg\n"
        f"export LG_BROKER_URL=redis://127.0.0.1:{stack.ports['redis']}/0\n"
    )

    up = stack.up()

    assert up.returncode == 0, up.stderr
    assert stat.S_IMODE((stack.root / "env").stat().st_mode) == 0o600
    assert stat.S_IMODE((stack.root / "logs").stat().st_mode) == 0o700
    env = stack.env()
    assert all(len(value) >= 32 for value in passwords_of(env).values())
    assert "no password supplied" in postgres_refusal(f"host=127.0.0.1 port={port} user=lg dbname=lg")
    with psycopg.connect(env["LG_RUN_STORE"].replace("+psycopg", ""), connect_timeout=10) as connection:
        assert connection.execute("SELECT note FROM kept").fetchall() == [("from before the passwords",)]
    assert redis_answer(stack.ports["redis"], b"PING\r\n").startswith(b"-NOAUTH")

    # An env file deleted while the stack is stopped: the next up chooses new passwords, and the old ones stop working.
    assert stack.run("down").returncode == 0
    (stack.root / "env").unlink()
    again = stack.up()
    assert again.returncode == 0, again.stderr
    renewed = stack.env()
    assert set(passwords_of(renewed).values()).isdisjoint(passwords_of(env).values())
    assert "password authentication failed" in postgres_refusal(env["LG_RUN_STORE"].replace("+psycopg", ""))
    with psycopg.connect(renewed["LG_RUN_STORE"].replace("+psycopg", ""), connect_timeout=10) as connection:
        assert connection.execute("SELECT count(*) FROM kept").fetchone() == (1,)


def test_up_refuses_to_add_passwords_to_a_stack_still_running_without_them(stack):
    """Its running servers would stay open and its workers could not use new passwords: `down` comes first."""
    (stack.root / "pids").mkdir(parents=True)
    stand_in = subprocess.Popen(
        ["sleep", "300"], start_new_session=True
    )  # the stack's Redis, as far as its pid file says
    try:
        start = Path(f"/proc/{stand_in.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        (stack.root / "pids" / "redis.pid").write_text(f"{stand_in.pid} {start}\n")
        (stack.root / "stack.json").write_text(json.dumps({"ports": stack.ports, "imports": [], "concurrency": 1}))
        old_env = f"export LG_BROKER_URL=redis://127.0.0.1:{stack.ports['redis']}/0\n"
        (stack.root / "env").write_text(old_env)

        up = stack.up()

        assert up.returncode == 2, up.stderr
        lines = up.stderr.strip().splitlines()
        assert (
            len(lines) == 1 and "without passwords" in lines[0] and f"lg stack down --dir {stack.root}" in lines[0]
        ), lines
        assert (stack.root / "env").read_text() == old_env
        assert stand_in.poll() is None and set(stack.pids()) == {"redis"}  # nothing started, nothing stopped
    finally:
        stand_in.send_signal(signal.SIGKILL)
        stand_in.wait()
