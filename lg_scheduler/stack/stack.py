"""The local stack: every LittleGhost service as local processes, without Docker.

``lg stack up`` starts, in ``.lg/stack`` (or ``--dir``):

    redis              redis-server (append-only file in redis/)
    postgres           PostgreSQL, database ``lg`` (cluster in postgres/, kept across down/up)
    worker-orchestrate lg worker --queues lg.orchestrate
    worker-model       lg worker --queues lg.model
    worker-tools       lg worker --queues lg.tools
    worker-sandbox     lg worker --queues lg.sandbox
    scheduler          lg scheduler
    flower             celery -A lg_workers flower

and writes ``env`` (``source`` it to point any shell, web app or test at the
stack), ``stack.json`` (ports and imports, reused by the next ``up``), pid
files and logs. The application services and their commands are the ones of
``docker/compose.yaml`` (:func:`service_commands`; a test keeps the two in
step), so what runs in development is what runs in containers.

Every server asks for a password (:mod:`lg_scheduler.stack.credentials`):
PostgreSQL's role ``lg``, Redis and Flower's user ``lg`` each get one at the
first ``up``, kept in ``env`` (mode 0600) and given to the stack's own
processes in their environment. What ``up`` prints masks them and says where
they are. A stack started before it had passwords gets them at its next
``up`` (its cluster, created to trust every local user, is switched to
scram-sha-256 while stopped); one still running is asked to go ``down`` first.

``down`` and ``status`` need only the pid files, so a stack whose stack.json
was deleted or damaged can still be stopped. ``up`` refuses to choose new ports
while such a stack runs, and to change the ports, imports or concurrency of
running processes (they keep what they started with).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lg_core.errors import ConfigurationError
from lg_core.run import STACK_DIR_VARIABLE
from lg_scheduler.stack.credentials import (
    FLOWER_USER,
    StackCredentials,
    load_credentials,
    write_private,
)
from lg_scheduler.stack.processes import ProcessSpec, ProcessState, ProcessTable
from lg_scheduler.stack.servers import PostgresServer, RedisServer, free_port

DEFAULT_DIR = Path(".lg/stack")
DATABASE = "lg"
READY_TIMEOUT = 90.0
WORKER_SERVICES = {
    "worker-orchestrate": "lg.orchestrate",
    "worker-model": "lg.model",
    "worker-tools": "lg.tools",
    "worker-sandbox": "lg.sandbox",
}
# Flower's task list shows args (run, step and tool: lg_workers.task_display), results (short
# outcomes) and a failed step's exception (how its run failed, or its worker was lost); task
# arguments carry ids only, so no content shows.
FLOWER_COLUMNS = "name,state,args,result,exception,received,runtime,worker"
PREFERRED_PORTS = {"redis": 6379, "postgres": 5432, "flower": 5555}
SERVICES = ("redis", "postgres", *WORKER_SERVICES, "scheduler", "flower")
APP_SERVICES = (*WORKER_SERVICES, "scheduler", "flower")  # the processes given LG_IMPORTS


class StackError(Exception):
    """A stack process could not be started or did not become ready; the message says where to look."""


def service_commands(concurrency: int | None = None) -> dict[str, list[str]]:
    """The application services and their commands (``lg``/``celery`` as argv[0]), shared with compose."""
    extra = ["--concurrency", str(concurrency)] if concurrency else []
    commands = {name: ["lg", "worker", "--queues", queue, *extra] for name, queue in WORKER_SERVICES.items()}
    commands["scheduler"] = ["lg", "scheduler"]
    commands["flower"] = ["celery", "-A", "lg_workers", "flower", f"--tasks_columns={FLOWER_COLUMNS}"]
    return commands


@dataclass
class StackSettings:
    """What ``up`` chose, saved in stack.json so the next ``up`` (after ``down``) reuses it."""

    ports: dict[str, int] = field(default_factory=dict)
    imports: list[str] = field(default_factory=list)
    concurrency: int | None = None
    postgres_root: str | None = None

    def redis_url(self, password: str) -> str:
        return f"redis://:{password}@127.0.0.1:{self.ports['redis']}/0"

    def store_url(self, password: str) -> str:
        return f"postgresql+psycopg://lg:{password}@127.0.0.1:{self.ports['postgres']}/{DATABASE}"

    @property
    def flower_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['flower']}"


@dataclass
class UpReport:
    started: list[str]
    already_running: list[str]
    settings: StackSettings
    env_file: Path
    credentials: StackCredentials


class LocalStack:
    """The stack rooted at ``root``: ``up``, ``down``, ``status`` and log files."""

    def __init__(self, root: Path = DEFAULT_DIR) -> None:
        self.root = Path(root).absolute()
        self.table = ProcessTable(self.root)
        self.state_file = self.root / "stack.json"
        self.env_file = self.root / "env"

    # -- settings ---------------------------------------------------------------------------

    @property
    def down_command(self) -> str:
        """``lg stack down --dir ROOT``, quoted for a shell."""
        return f"lg stack down --dir {shlex.quote(str(self.root))}"

    def was_started(self) -> bool:
        """Did an ``up`` ever run here (stack.json or logs left behind)?"""
        return self.state_file.exists() or self.table.logs.is_dir()

    def load_settings(self) -> StackSettings | None:
        try:
            text = self.state_file.read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise ConfigurationError(f"cannot read {self.state_file}: {exc.strerror or exc}") from None
        try:
            return StackSettings(**json.loads(text))
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"{self.state_file} is damaged ({exc}); `{self.down_command}` stops the stack without it, "
                "then delete it to choose ports afresh"
            ) from None

    def resolve_settings(
        self, *, imports: list[str] | None, concurrency: int | None, ports: dict[str, int | None]
    ) -> StackSettings:
        """Saved settings, overridden by what this ``up`` asked for; new settings only for stopped processes."""
        states = self.status()
        saved = self.load_settings()
        if saved is None:
            lingering = [s.name for s in states if s.alive or s.members]
            if lingering:
                raise ConfigurationError(
                    f"{self.state_file} is missing while processes of the stack run ({', '.join(lingering)}), "
                    f"so their ports are unknown; run `{self.down_command}` first, then `lg stack up`"
                )
            saved = StackSettings()
        imports = merged_imports(saved.imports, imports)
        self._refuse_changes(saved, {s.name for s in states if s.alive}, imports, concurrency, ports)
        chosen: dict[str, int] = {}
        for name, preferred in PREFERRED_PORTS.items():
            chosen[name] = (
                ports.get(name) or saved.ports.get(name) or (preferred if _port_free(preferred) else listening_port())
            )
        return StackSettings(
            ports=chosen,
            imports=imports,
            concurrency=concurrency or saved.concurrency,
            postgres_root=saved.postgres_root or str(self._postgres_root()),
        )

    def _refuse_changes(
        self,
        saved: StackSettings,
        alive: set[str],
        imports: list[str],
        concurrency: int | None,
        ports: dict[str, int | None],
    ) -> None:
        """A running process keeps the settings it started with, so changing them needs a ``down`` first."""
        # option: (asked, saved, the processes that use it, how the running stack has it)
        changes: dict[str, tuple[object, object, tuple[str, ...], str]] = {
            f"--{name}-port": (
                ports.get(name),
                saved.ports.get(name),
                SERVICES,
                f"{name} on port {saved.ports.get(name)}",
            )
            for name in PREFERRED_PORTS
        }
        changes["--import"] = (
            imports or None,
            saved.imports,
            APP_SERVICES,
            f"--import {' --import '.join(saved.imports)}" if saved.imports else "no --import",
        )
        changes["--concurrency"] = (
            concurrency,
            saved.concurrency,
            tuple(WORKER_SERVICES),
            f"--concurrency {saved.concurrency or 'default'}",
        )
        for option, (asked, previous, users, running_with) in changes.items():
            if asked and asked != previous and alive.intersection(users):
                raise ConfigurationError(
                    f"the stack in {self.root} is running with {running_with}; "
                    f"run `{self.down_command}` before changing {option}"
                )

    # -- processes --------------------------------------------------------------------------

    def specs(self, settings: StackSettings, credentials: StackCredentials) -> dict[str, ProcessSpec]:
        redis = self._redis(settings, credentials)
        postgres = self._postgres(settings, credentials)
        specs = {
            "redis": ProcessSpec("redis", redis.command(persist=True)),
            "postgres": _postgres_spec(postgres.command(durable=True), postgres.data),
        }
        env = self.app_env(settings, credentials)
        for name, argv in service_commands(settings.concurrency).items():
            argv = _local_argv(argv)
            if name == "flower":
                # Basic auth from the environment (Flower reads FLOWER_* variables): on the command line,
                # every local user would read the password in `ps`.
                argv += [f"--port={settings.ports['flower']}", "--address=127.0.0.1"]
                flower_env = {k: v for k, v in env.items() if k != "FLOWER_UNAUTHENTICATED_API"}
                specs[name] = ProcessSpec(
                    name, argv, {**flower_env, "FLOWER_BASIC_AUTH": credentials.flower_basic_auth}, Path.cwd()
                )
            else:
                specs[name] = ProcessSpec(name, argv, env, Path.cwd())
        return specs

    def app_env(self, settings: StackSettings, credentials: StackCredentials) -> dict[str, str]:
        """The environment of workers, scheduler and Flower: this shell's, pointed at the stack."""
        env = {k: v for k, v in os.environ.items() if k != "FLOWER_BASIC_AUTH"}
        env.update(stack_variables(settings, credentials))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)
        env[STACK_DIR_VARIABLE] = str(self.root)
        return env

    def up(
        self,
        *,
        imports: list[str] | None = None,
        concurrency: int | None = None,
        ports: dict[str, int | None] | None = None,
        progress: Callable[[str], None] = lambda _line: None,
    ) -> UpReport:
        """Start whatever is not running, wait until it is ready, write the env file.

        Nothing is saved in stack.json before the settings are known to work here: a port taken by
        another program, or a missing binary, fails with stack.json as it was.
        """
        ports = ports or {}
        self._make_root()
        kept = self.state_file.exists()
        settings = self.resolve_settings(imports=imports, concurrency=concurrency, ports=ports)
        credentials, new_passwords = self._credentials()
        for state in self.status():
            if state.name in PREFERRED_PORTS and not state.alive and not state.members:
                self._check_port(state.name, settings, asked=bool(ports.get(state.name)), kept=kept)
        with _server_errors():
            specs = self.specs(settings, credentials)
        self.state_file.write_text(json.dumps(asdict(settings), indent=2) + "\n")
        # Before any server starts with the passwords: where they are is never lost.
        write_private(self.env_file, env_file_text(settings, credentials, self.root))
        started: list[str] = []
        already: list[str] = []

        def launch(names: list[str]) -> dict[str, int]:
            offsets = {}
            for name in names:
                state = self.table.state(name)
                if state.alive:
                    already.append(name)
                    continue
                if state.members:  # leader died, children live on: clear them out first
                    self.table.stop(specs[name])
                    self._check_port(name, settings, asked=bool(ports.get(name)), kept=kept)
                progress(f"starting {name}")
                offsets[name] = self.table.start(specs[name])[1]
                started.append(name)
            return offsets

        with _server_errors():
            if not self.table.state("redis").alive:
                self._redis(settings, credentials).prepare()  # its config file, holding the password
            if not self.table.state("postgres").alive:  # initdb on the first up only; a password when it needs one
                self._postgres(settings, credentials).prepare(new_password="postgres" in new_passwords)
        self._wait(launch(["redis", "postgres"]), settings, credentials)
        with _server_errors():
            self._postgres(settings, credentials).create_database(DATABASE, exist_ok=True)
        self._wait(launch([n for n in SERVICES if n not in ("redis", "postgres")]), settings, credentials)
        return UpReport(started, already, settings, self.env_file, credentials)

    def down(self, progress: Callable[[str], None] = lambda _line: None) -> list[str]:
        """Stop every process (services first, then PostgreSQL, then Redis); returns what was running.

        Works from the pid files alone: stack.json may be missing or damaged.
        """
        specs = {name: ProcessSpec(name, []) for name in SERVICES}
        specs["postgres"] = _postgres_spec([], self._postgres_data())
        stopped: list[str] = []
        tiers = [["flower", "scheduler", *WORKER_SERVICES], ["postgres"], ["redis"]]
        for tier in tiers:
            with ThreadPoolExecutor(len(tier)) as pool:
                for name, was_running in zip(tier, pool.map(lambda n: self.table.stop(specs[n]), tier), strict=True):
                    if was_running:
                        progress(f"stopped {name}")
                        stopped.append(name)
        return stopped

    def status(self) -> list[ProcessState]:
        return [self.table.state(name) for name in SERVICES]

    def log_file(self, name: str) -> Path:
        if name not in SERVICES:
            raise ConfigurationError(f"no stack process named {name!r}; the processes are {', '.join(SERVICES)}")
        return self.table.log_file(name)

    # -- helpers ----------------------------------------------------------------------------

    def _credentials(self) -> tuple[StackCredentials, set[str]]:
        """The passwords of the env file, new ones for those it lacks (which no running process may be using).

        A stack whose processes run without passwords (started before the stack had them) would be
        left open, and its workers could not use new ones: it must be stopped first.
        """
        credentials, new = load_credentials(self.env_file)
        running = [state.name for state in self.status() if state.alive or state.members]
        if new and running:
            raise ConfigurationError(
                f"the stack in {self.root} runs ({', '.join(running)}) without passwords in {self.env_file}; "
                f"run `{self.down_command}`, then `lg stack up` to start it with passwords (the data is kept)"
            )
        return credentials, new

    def _redis(self, settings: StackSettings, credentials: StackCredentials) -> RedisServer:
        return RedisServer(root=self.root / "redis", port=settings.ports["redis"], password=credentials.redis)

    def _postgres(self, settings: StackSettings, credentials: StackCredentials) -> PostgresServer:
        return PostgresServer(
            root=Path(settings.postgres_root or self.root / "postgres"),
            port=settings.ports["postgres"],
            password=credentials.postgres,
        )

    def _make_root(self) -> None:
        """The stack directory, and its directories that hold data readable by this user only.

        Redis's append-only file holds every key (event streams included) and the logs may quote
        what a run did: a password on the server is no use if another user can read its files.
        PostgreSQL keeps its data directory at mode 0700 itself.
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for private in (self.root / "redis", self.table.logs):
                private.mkdir(mode=0o700, exist_ok=True)
                private.chmod(0o700)  # a directory made before the stack had passwords
        except OSError as exc:
            raise ConfigurationError(f"cannot create the stack directory {self.root}: {exc.strerror or exc}") from None

    def _postgres_root(self) -> Path:
        """Where the cluster lives: in the stack dir, unless we are root and the 'postgres' user cannot reach it."""
        local = self.root / "postgres"
        if os.geteuid() != 0 or local.exists() or _reachable_by_postgres(self.root):
            return local
        return self._shared_postgres_root()

    def _shared_postgres_root(self) -> Path:
        digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:12]
        return Path("/var/lib/littleghost") / f"stack-{digest}" / "postgres"

    def _postgres_data(self) -> Path:
        """The cluster's data directory: from stack.json, or without it where ``up`` puts clusters."""
        try:
            settings = self.load_settings()
        except ConfigurationError:
            settings = None
        if settings is not None and settings.postgres_root:
            return Path(settings.postgres_root) / "data"
        local, shared = self.root / "postgres", self._shared_postgres_root()
        return (shared if shared.exists() and not local.exists() else local) / "data"

    def _check_port(self, name: str, settings: StackSettings, *, asked: bool, kept: bool) -> None:
        """A port taken by another program: say whose choice it was and what to do instead."""
        port = settings.ports.get(name)
        if not port or _port_free(port):
            return
        if asked:
            raise StackError(
                f"port {port} for {name} is in use by another program; stop it, or choose another --{name}-port"
            )
        origin = " (kept from the last `lg stack up`)" if kept else ""
        running = any(state.alive for state in self.status())
        after = f" after `{self.down_command}`" if running else ""
        raise StackError(
            f"port {port} for {name}{origin} is in use by another program; stop it, or pass "
            f"--{name}-port to choose another{after}"
        )

    def _wait(self, offsets: dict[str, int], settings: StackSettings, credentials: StackCredentials) -> None:
        """Wait until every process just started is ready; a process that exits is a StackError."""
        checks = {name: self._readiness(name, offset, settings, credentials) for name, offset in offsets.items()}
        deadline = time.monotonic() + READY_TIMEOUT
        while checks:
            for name in list(checks):
                if not self.table.state(name).alive:
                    raise StackError(f"{name} exited while starting:\n{self._tail(name, offsets[name])}")
                if checks[name]():
                    del checks[name]
            if checks and time.monotonic() > deadline:
                name = sorted(checks)[0]
                raise StackError(f"{name} not ready after {READY_TIMEOUT:.0f} s:\n{self._tail(name, offsets[name])}")
            time.sleep(0.1)

    def _readiness(
        self, name: str, offset: int, settings: StackSettings, credentials: StackCredentials
    ) -> Callable[[], bool]:
        if name == "redis":
            return self._redis(settings, credentials).is_ready
        if name == "postgres":
            return self._postgres(settings, credentials).is_ready
        if name == "flower":
            return lambda: _http_ok(f"{settings.flower_url}/healthcheck")
        if name in WORKER_SERVICES:
            return lambda: "ready." in _read_from(self.table.log_file(name), offset)
        return lambda: True  # the scheduler: alive is all we can see

    def _tail(self, name: str, offset: int, lines: int = 25) -> str:
        text = _read_from(self.table.log_file(name), offset).splitlines()[-lines:]
        return "\n".join(text) + f"\n(full log: {self.table.log_file(name)})"


def stack_variables(settings: StackSettings, credentials: StackCredentials) -> dict[str, str]:
    """The LG_* variables that point a process at the stack (the env file holds the same)."""
    variables = {
        "LG_RUN_STORE": settings.store_url(credentials.postgres),
        "LG_BROKER_URL": settings.redis_url(credentials.redis),
    }
    if settings.imports:
        variables["LG_IMPORTS"] = ",".join(settings.imports)
    return variables


def merged_imports(kept: list[str], asked: list[str] | None) -> list[str]:
    """The imports kept from earlier ``up``s followed by the new ones asked for (``--import`` adds, never drops)."""
    return [*kept, *(module for module in dict.fromkeys(asked or []) if module not in kept)]


def env_file_text(settings: StackSettings, credentials: StackCredentials, root: Path) -> str:
    """Shell lines to ``source`` (or ``.``): every value shell-quoted, the passwords inside them."""
    lines = [
        f"# LittleGhost local stack in {root}: `. {shlex.quote(str(root / 'env'))}`",
        "# The passwords of its PostgreSQL (user lg), Redis and Flower (user lg) are in the values below:",
        "# keep this file readable by you only (mode 0600).",
        f"# Flower: {settings.flower_url} (user {FLOWER_USER}, "
        f"the password after '{FLOWER_USER}:' in FLOWER_BASIC_AUTH)",
    ]
    variables = {**stack_variables(settings, credentials), "FLOWER_BASIC_AUTH": credentials.flower_basic_auth}
    lines += [f"export {key}={shlex.quote(value)}" for key, value in variables.items()]
    return "\n".join(lines) + "\n"


def _postgres_spec(argv: list[str], data: Path) -> ProcessSpec:
    """PostgreSQL stops on SIGINT (fast shutdown) sent to the postmaster, which is not the leader under runuser."""
    return ProcessSpec("postgres", argv, stop_signal=signal.SIGINT, signal_pid=lambda: _postmaster_pid(data))


@contextmanager
def _server_errors() -> Iterator[None]:
    """A server binary that is missing or fails (initdb, createdb): a StackError, not a traceback."""
    try:
        yield
    except subprocess.CalledProcessError as exc:
        output = (exc.stderr or exc.stdout or "").strip()
        raise StackError(f"{shlex.join(map(str, exc.cmd))} failed: {output}") from None
    except RuntimeError as exc:
        raise StackError(str(exc)) from None


def _local_argv(argv: list[str]) -> list[str]:
    """``lg``/``celery`` from this Python environment, whatever PATH says."""
    if argv[0] == "celery":
        return [sys.executable, "-m", "celery", *argv[1:]]
    script = Path(sys.executable).with_name("lg")
    if script.exists():
        return [str(script), *argv[1:]]
    found = shutil.which("lg")
    return [found, *argv[1:]] if found else [sys.executable, "-c", "from lg_core.cli import main; main()", *argv[1:]]


def _postmaster_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _reachable_by_postgres(path: Path) -> bool:
    probe = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(path)], capture_output=True)
    return probe.returncode == 0


def listening_port() -> int:
    """A free port below Linux's ephemeral range, so no outgoing connection takes it before a server binds it."""
    for _ in range(100):
        port = random.randint(20000, 32000)
        if _port_free(port):
            return port
    return free_port()


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


__all__ = [
    "DEFAULT_DIR",
    "FLOWER_COLUMNS",
    "SERVICES",
    "WORKER_SERVICES",
    "LocalStack",
    "StackError",
    "StackSettings",
    "UpReport",
    "env_file_text",
    "listening_port",
    "merged_imports",
    "service_commands",
    "stack_variables",
]
