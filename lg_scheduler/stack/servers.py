"""PostgreSQL and Redis servers started from their binaries, as local processes.

Used by ``lg stack up`` for development and by the test suite (which never
mocks them): each server runs on a local port with its data in a directory of
its own. Missing binaries raise with the command that installs them
(``ops/system-deps.sh``).
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_gracefully(process: subprocess.Popen, timeout: float = 20.0) -> None:
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
    and ``lg stack`` always runs it durable (``command(durable=True)``).
    """

    def __init__(self, root: Path | None = None, port: int | None = None, *, fsync: bool = False) -> None:
        if not isinstance(fsync, bool):
            raise TypeError(f"fsync must be True or False, got {fsync!r}")
        self.port = port or free_port()
        self.fsync = fsync
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="lg-pg-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.data = self.root / "data"
        self._owns_root = root is None
        self.process: subprocess.Popen | None = None
        self._user = "postgres" if os.geteuid() == 0 else None

    def _run_as(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
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

    def prepare(self) -> None:
        """Create the cluster in ``root/data`` unless it exists (so a restart keeps every database)."""
        if self._user:
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        if not (self.data / "PG_VERSION").exists():
            self._run_as([_pg_bin("initdb"), "-D", str(self.data), "-U", "lg", "--auth=trust", "-E", "UTF8", "--no-sync"])

    def command(self, *, durable: bool | None = None) -> list[str]:
        """The server's argv; ``durable`` keeps fsync on (the local stack), tests turn it off for speed.

        ``durable=None`` follows the constructor's ``fsync``.
        """
        fsync = self.fsync if durable is None else durable
        argv = [_pg_bin("postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.root),
                "-c", "listen_addresses=127.0.0.1", "-c", f"fsync={'on' if fsync else 'off'}",
                "-c", "max_connections=200"]
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
            [_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "lg", name],
            capture_output=True, text=True,
        )
        if done.returncode != 0 and not (exist_ok and "already exists" in done.stderr):
            raise RuntimeError(f"createdb {name} failed: {done.stderr.strip()}")
        return self.url(name)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://lg@127.0.0.1:{self.port}/{database}"

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
    """A redis-server on a local port; ``restart(wipe=True)`` loses every key (chaos tests)."""

    def __init__(self, root: Path | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="lg-redis-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self._owns_root = root is None
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
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
        return [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "yes" if persist else "no", "--dir", str(self.root), "--protected-mode", "no"]

    def is_ready(self) -> bool:
        """Does the server answer PING now?"""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
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
