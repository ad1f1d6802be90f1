"""Real servers for tests: PostgreSQL and Redis started from their binaries.

Nothing is mocked: each server runs as a child process on a free local port
with its data in a temporary directory, and is stopped at the end of the
session. When the binaries are missing the fixtures fail (not skip), because
CI must not silently drop the tests that need them (see ops/system-deps.sh).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed; run ops/system-deps.sh")
    return found


class PostgresServer:
    """A throwaway PostgreSQL cluster (run as the 'postgres' user when we are root)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="lg-pg-"))
        self.data = self.root / "data"
        self.process: subprocess.Popen | None = None
        self._user = "postgres" if os.geteuid() == 0 else None

    def _run_as(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        if self._user:
            argv = ["runuser", "-u", self._user, "--", *argv]
        return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)

    def start(self) -> PostgresServer:
        if self._user:
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run_as([_pg_bin("initdb"), "-D", str(self.data), "-U", "lg", "--auth=trust", "-E", "UTF8", "--no-sync"])
        argv = [_pg_bin("postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.root),
                "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"]
        if self._user:
            argv = ["runuser", "-u", self._user, "--", *argv]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited: {self.process.stderr.read().decode()[-2000:]}")
            probe = subprocess.run(
                [_pg_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True
            )
            if probe.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("postgres did not become ready in 30 s")

    def create_database(self, name: str) -> str:
        """Create database ``name`` and return its SQLAlchemy URL."""
        subprocess.run(
            [_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "lg", name],
            check=True, capture_output=True,
        )
        return self.url(name)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://lg@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)
