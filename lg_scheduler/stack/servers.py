"""PostgreSQL and Redis servers started from their binaries, as local processes.

Used by ``lg stack up`` for development and by the test suite (which never
mocks them): each server runs on a local port with its data in a directory of
its own. Missing binaries raise with the command that installs them
(``ops/system-deps.sh``).

Given a ``password`` (``lg stack``), a server refuses every client without it:
PostgreSQL authenticates every connection, local socket included, with
scram-sha-256, and Redis requires AUTH. The password travels in a private file
or on a pipe, never in a command line. Without one (the test suite's servers)
PostgreSQL trusts every local connection, and Redis asks for nothing.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from lg_scheduler.stack.credentials import write_private

# pg_hba.conf of a cluster with a password: every connection gives it, the local socket's too.
PASSWORD_HBA = """\
# Written by lg stack up: every connection authenticates with the password (scram-sha-256).
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 scram-sha-256
host    all       all   127.0.0.1/32  scram-sha-256
host    all       all   ::1/128       scram-sha-256
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_gracefully(process: subprocess.Popen[Any], timeout: float = 20.0) -> None:
    """SIGTERM a child process and wait for it; SIGKILL it if it is still there after ``timeout``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed; run ops/system-deps.sh")
    return found


class PostgresServer:
    """A PostgreSQL cluster in ``root`` (run as the 'postgres' user when we are root).

    ``fsync`` is off by default because the test suite needs speed, not crash
    safety; a benchmark of the durable engine must turn it on (bench/distributed.py),
    and ``lg stack`` always runs it durable (``command(durable=True)``). With a
    ``password`` the role ``lg`` has it and every connection must give it.
    """

    def __init__(
        self, root: Path | None = None, port: int | None = None, *, fsync: bool = False, password: str | None = None
    ) -> None:
        if not isinstance(fsync, bool):
            raise TypeError(f"fsync must be True or False, got {fsync!r}")
        self.port = port or free_port()
        self.fsync = fsync
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="lg-pg-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.data = self.root / "data"
        self._owns_root = root is None
        self.process: subprocess.Popen[bytes] | None = None
        self._user = "postgres" if os.geteuid() == 0 else None
        if password is not None and (not password or not password.isprintable()):
            raise ValueError("a PostgreSQL password must be printable text (no newline: it ends a statement)")
        self.password = password

    def _run_as(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        if self._user:
            argv = ["runuser", "-u", self._user, "--", *argv]
        return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)

    def start(self) -> PostgresServer:
        """Start the server, its log in ``root/postgres.log``.

        Not in a pipe: nothing reads a pipe once the server is up, and a backend
        that logs into a full one (64 KiB: every ERROR is logged with its
        statement, and each commit that loses a race raises one) blocks in
        write() holding its row locks, so every other transaction waits on it
        for good.
        """
        self.prepare()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()
        return self

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    def prepare(self, *, new_password: bool = False) -> None:
        """Create the cluster in ``root/data`` unless it exists (so a restart keeps every database).

        With a password, an existing cluster is made to require it: one whose
        pg_hba.conf is not :data:`PASSWORD_HBA` (a cluster created to trust every
        local user, before the stack had passwords) or whose password is
        ``new_password`` (the env file holding it was lost) gets the password and
        that pg_hba.conf, while the server is stopped.
        """
        owner = self._owner()
        if owner is not None:
            os.chown(self.root, *owner)
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        elif self.password and (new_password or not self._requires_password()):
            self._set_password()

    def _initdb(self) -> None:
        initdb = [_pg_bin("initdb"), "-D", str(self.data), "-U", "lg", "-E", "UTF8", "--no-sync"]
        if not self.password:
            self._run_as([*initdb, "--auth=trust"])
            return
        password_file = self.root / "initdb-password"
        write_private(password_file, self.password + "\n", owner=self._owner())
        try:
            self._run_as([*initdb, "--auth=scram-sha-256", f"--pwfile={password_file}"])
        finally:
            password_file.unlink(missing_ok=True)
        write_private(self.data / "pg_hba.conf", PASSWORD_HBA, owner=self._owner())

    def _requires_password(self) -> bool:
        try:
            return (self.data / "pg_hba.conf").read_text() == PASSWORD_HBA
        except OSError:
            return False

    def _set_password(self) -> None:
        """Give role ``lg`` the password in single-user mode (no server listens meanwhile), then require it.

        The statement goes to the backend on its standard input, so the password is
        in no command line; a cluster another server still runs on is refused by
        PostgreSQL itself (its postmaster.pid), and nothing is changed.
        """
        password = self.password or ""
        statement = "ALTER ROLE lg WITH PASSWORD '{}'\n".format(password.replace("'", "''"))
        single = [
            _pg_bin("postgres"),
            "--single",
            "-D",
            str(self.data),
            "-c",
            "password_encryption=scram-sha-256",
            "-c",
            "log_statement=none",
            "-c",
            "log_min_error_statement=panic",
            "postgres",
        ]
        try:
            done = self._run_as(single, input=statement)
        except subprocess.CalledProcessError as exc:
            raise self._password_failure(f"{exc.stdout or ''}{exc.stderr or ''}") from None
        if "ERROR:" in done.stderr or "FATAL:" in done.stderr:  # single-user mode exits 0 after a failed statement
            raise self._password_failure(done.stderr)
        write_private(self.data / "pg_hba.conf", PASSWORD_HBA, owner=self._owner())

    def _password_failure(self, output: str) -> RuntimeError:
        shown = output.replace(self.password or "", "***").strip()[-2000:]
        return RuntimeError(f"setting the password of the PostgreSQL cluster in {self.data} failed: {shown}")

    def _owner(self) -> tuple[int, int] | None:
        """The uid and gid of the user the server runs as, when that is not us."""
        if not self._user:
            return None
        entry = pwd.getpwnam(self._user)
        return entry.pw_uid, entry.pw_gid

    def command(self, *, durable: bool | None = None) -> list[str]:
        """The server's argv; ``durable`` keeps fsync on (the local stack), tests turn it off for speed.

        ``durable=None`` follows the constructor's ``fsync``.
        """
        fsync = self.fsync if durable is None else durable
        argv = [
            _pg_bin("postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-k",
            str(self.root),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"fsync={'on' if fsync else 'off'}",
            "-c",
            "max_connections=200",
        ]
        if self._user:
            argv = ["runuser", "-u", self._user, "--", *argv]
        return argv

    def is_ready(self) -> bool:
        """Does the server accept connections now?

        Probed only once the server says it is up (the status line of its
        ``postmaster.pid``), and as the cluster's role: a probe while it starts
        is logged as ``FATAL: the database system is starting up``, and one as
        the OS user as ``FATAL: role "root" does not exist``, errors in the log
        a user of ``lg stack`` watches.
        """
        if self._status() not in ("ready", None):
            return False
        probe = subprocess.run(
            [_pg_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "lg", "-d", "postgres"],
            capture_output=True,
        )
        return probe.returncode == 0

    def _status(self) -> str | None:
        """The status line of ``postmaster.pid`` ("starting", "ready", ...; PostgreSQL 10 and later),
        "" while there is no such file, None when it cannot be read here."""
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
        except FileNotFoundError:
            return ""
        except OSError:
            return None
        return lines[7].strip() if len(lines) > 7 else None

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = self.log_path.read_text(errors="replace")
                raise RuntimeError(f"postgres exited: {log[-2000:]}")
            if self.is_ready():
                return
            time.sleep(0.1)
        raise RuntimeError("postgres did not become ready in 30 s")

    def create_database(self, name: str, *, exist_ok: bool = False) -> str:
        """Create database ``name`` and return its SQLAlchemy URL."""
        done = subprocess.run(
            [_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "lg", "--no-password", name],
            capture_output=True,
            text=True,
            env=self._client_env(),
        )
        if done.returncode != 0 and not (exist_ok and "already exists" in done.stderr):
            raise RuntimeError(f"createdb {name} failed: {done.stderr.strip()}")
        return self.url(name)

    def url(self, database: str = "postgres") -> str:
        user = f"lg:{self.password}" if self.password else "lg"
        return f"postgresql+psycopg://{user}@127.0.0.1:{self.port}/{database}"

    def _client_env(self) -> dict[str, str]:
        """The environment of a PostgreSQL client program: the password in PGPASSWORD, not its argv."""
        env = {key: value for key, value in os.environ.items() if key != "PGPASSWORD"}
        if self.password:
            env["PGPASSWORD"] = self.password
        return env

    def halt(self, timeout: float = 20.0) -> None:
        """Stop the server and keep its data (``start()`` brings it back): PostgreSQL's fast shutdown.

        SIGINT to the postmaster rolls back and disconnects every client, then
        checkpoints and exits. SIGTERM, what ``runuser`` would pass on, is the
        smart shutdown: it waits for clients to leave, and a pooled connection
        never does, so ``runuser`` SIGKILLed the server after 2 s, and a backend
        could still answer its client for a moment after that.
        """
        if self.process is None or self.process.poll() is not None:
            return
        try:
            postmaster = int((self.data / "postmaster.pid").read_text().splitlines()[0])
            os.kill(postmaster, signal.SIGINT)
        except (OSError, ValueError, IndexError):  # not up yet, or already gone: the wrapper's way
            stop_gracefully(self.process, timeout)
            return
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_gracefully(self.process, timeout)

    def stop(self) -> None:
        self.halt()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)


class RedisServer:
    """A redis-server on a local port; ``restart(wipe=True)`` loses every key (chaos tests).

    With a ``password`` every client must AUTH; it is written to ``root/redis.conf``
    (mode 0600), the config file the server is started with, by :meth:`prepare`.
    """

    def __init__(self, root: Path | None = None, port: int | None = None, *, password: str | None = None) -> None:
        self.port = port or free_port()
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="lg-redis-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self._owns_root = root is None
        self.process: subprocess.Popen[bytes] | None = None
        self.password = password

    @property
    def url(self) -> str:
        user = f":{self.password}@" if self.password else ""
        return f"redis://{user}127.0.0.1:{self.port}/0"

    @property
    def config_path(self) -> Path:
        return self.root / "redis.conf"

    def prepare(self) -> None:
        """Write the config file holding the password (none without one)."""
        if self.password:
            write_private(self.config_path, f"requirepass {self.password}\n")

    def start(self) -> RedisServer:
        self.prepare()
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            if self.is_ready():
                return self
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING in 20 s")

    def command(self, *, persist: bool = False) -> list[str]:
        """The server's argv; ``persist`` keeps an append-only file in ``root`` (the local stack)."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; run ops/system-deps.sh")
        config = [str(self.config_path)] if self.password else []
        return [
            binary,
            *config,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if persist else "no",
            "--dir",
            str(self.root),
        ]

    def is_ready(self) -> bool:
        """Does the server answer PING now (after AUTH, given a password)?"""
        command = b"PING\r\n"
        if self.password:
            secret = self.password.encode()
            command = b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(secret), secret) + command
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                sock.sendall(command)
                answer, replies = b"", 2 if self.password else 1
                while answer.count(b"\r\n") < replies:
                    piece = sock.recv(64)
                    if not piece:
                        break
                    answer += piece
                return answer.endswith(b"+PONG\r\n")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def restart(self, *, wipe: bool = True) -> None:
        """Kill and start again on the same port; with ``wipe`` nothing survives (no persistence)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if wipe:
            for dump in self.root.glob("*.rdb"):
                dump.unlink()
        self.start()
