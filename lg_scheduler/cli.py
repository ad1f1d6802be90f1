"""``lg scheduler`` and ``lg stack``: recovery loop and the local development stack.

    lg scheduler --interval 1                    outbox relay, lease sweeper, deadlines (one per fleet is enough)
    lg stack up --import myapp.agents            Redis, PostgreSQL, workers, scheduler, Flower as local processes
    lg stack status | lg stack logs worker-model | lg stack down

Registered through the ``littleghost.cli`` entry point (lg_core never imports
lg_scheduler). ``lg stack`` needs no settings: it creates the store and broker
and writes them to ``.lg/stack/env`` for other shells to ``source``.
"""

from __future__ import annotations

import logging
import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from lg_core.cli_errors import UsageError, fail
from lg_core.cli_imports import import_module
from lg_core.cli_output import error_console, output_console
from lg_core.cli_session import ImportOption, StoreOption, session
from lg_core.errors import ConfigurationError
from lg_core.urls import safe_url
from lg_scheduler.stack.credentials import FLOWER_USER
from lg_scheduler.stack.elsewhere import running_stack_dirs
from lg_scheduler.stack.processes import ProcessState
from lg_scheduler.stack.stack import DEFAULT_DIR, SERVICES, LocalStack, StackError, merged_imports
from lg_workers.broker_check import check_broker
from lg_workers.cli import BrokerOption, LogLevel

DirOption = Annotated[
    Path, typer.Option("--dir", metavar="DIR", file_okay=False, help="Where the stack keeps data, pid files and logs.")
]


def _port(name: str) -> Any:
    return typer.Option(
        f"--{name}-port", min=1, max=65535, metavar="PORT", help=f"{name} port (default: kept from the last up)."
    )


def scheduler(
    ctx: typer.Context,
    interval: Annotated[
        float,
        typer.Option("--interval", min=0.05, max=3600.0, metavar="SECONDS", help="Seconds between recovery passes."),
    ] = 1.0,
    imports: ImportOption = None,
    loglevel: Annotated[LogLevel, typer.Option("--loglevel", "-l", case_sensitive=False)] = LogLevel.INFO,
    store: StoreOption = None,
    broker: BrokerOption = None,
) -> None:
    """Recover runs: republish unpublished steps, re-dispatch expired leases, end overdue runs (until stopped)."""
    from lg_scheduler.lost_tasks import LostTasks
    from lg_scheduler.scheduler import Scheduler
    from lg_workers.app_factory import create_app

    logging.basicConfig(level=loglevel.value, format="[%(asctime)s: %(levelname)s/%(name)s] %(message)s")
    with session(ctx, store, imports, durable=True, load_imports=True, broker_url=broker) as runtime:
        if not runtime.configuration.broker_url:
            raise UsageError(
                "lg scheduler needs the workers' broker: pass --broker redis://HOST:6379/0, or set "
                "LG_BROKER_URL (or broker_url in lg.yaml)"
            )
        check_broker(runtime.configuration.broker_url)  # else it sweeps on, relaying nothing, and says nothing
        lost_tasks = LostTasks(create_app(runtime.configuration))  # ends a dead worker's tasks in Flower
        lost_tasks.start()
        loop = Scheduler(runtime, lost_tasks=lost_tasks)
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda _signum, _frame: stop.set())
        error_console().print(f"scheduler: a recovery pass every {interval:g} s", highlight=False)
        loop.run_forever(interval, stop=stop)  # a pass in progress finishes before it returns
        lost_tasks.stop()
    error_console().print("scheduler: stopped")


# -- lg stack -------------------------------------------------------------------------------

stack_app = typer.Typer(
    name="stack",
    help="The local stack: Redis, PostgreSQL, workers, scheduler and Flower, without Docker.",
    no_args_is_help=True,
)


@stack_app.command("up")
def stack_up(
    directory: DirOption = DEFAULT_DIR,
    imports: Annotated[
        list[str] | None,
        typer.Option(
            "--import",
            metavar="MODULE",
            help="Application module the workers import, added to those kept from earlier ups (repeatable).",
        ),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", min=1, max=1000, help="Processes or threads per worker.")
    ] = None,
    redis_port: Annotated[int | None, _port("redis")] = None,
    postgres_port: Annotated[int | None, _port("postgres")] = None,
    flower_port: Annotated[int | None, _port("flower")] = None,
) -> None:
    """Start whatever is not running yet and print the URLs (running again starts no duplicates)."""
    info = error_console()
    stack = LocalStack(directory)
    check_imports(stack, imports)
    if not any(state.alive for state in stack.status()):
        for other in running_stack_dirs(excluding=stack.root):
            info.print(
                f"warning: a stack is already running in {other}; this starts another one in {stack.root}, on "
                f"other ports (`lg stack down --dir {shlex.quote(str(other))}` stops the other one)",
                highlight=False,
                soft_wrap=True,
            )
    ports = {"redis": redis_port, "postgres": postgres_port, "flower": flower_port}
    try:
        report = stack.up(imports=imports, concurrency=concurrency, ports=ports, progress=info.print)
    except StackError as exc:
        info.print(f"[bold red]error:[/] [red]{escape(str(exc))}[/]", soft_wrap=True, highlight=False)
        running = [state.name for state in stack.status() if state.alive or state.members]
        if running:
            info.print(
                f"still running: {', '.join(running)}; `{stack.down_command}` stops them",
                highlight=False,
                soft_wrap=True,
            )
        else:
            info.print("no stack process is running", highlight=False)
        raise typer.Exit(1) from None
    if report.already_running:
        info.print(f"already running: {', '.join(report.already_running)}", highlight=False, soft_wrap=True)
    settings, credentials = report.settings, report.credentials
    out = output_console()
    # The passwords are printed nowhere: the env file holds them (mode 0600), and sourcing it is the way to use them.
    out.print(f"run store  {safe_url(settings.store_url(credentials.postgres))}", highlight=False)
    out.print(f"broker     {safe_url(settings.redis_url(credentials.redis))}", highlight=False)
    out.print(f"flower     {settings.flower_url}  (user {FLOWER_USER})", highlight=False)
    out.print(
        f"env file   {report.env_file}  (source it: . {shlex.quote(str(report.env_file))})",
        highlight=False,
        soft_wrap=True,
    )
    out.print(
        "passwords  in the env file, readable by you only: LG_RUN_STORE, LG_BROKER_URL and FLOWER_BASIC_AUTH",
        highlight=False,
        soft_wrap=True,
    )


def check_imports(stack: LocalStack, imports: list[str] | None) -> None:
    """Import the modules the workers will import, here and first: a typo is one line and nothing
    starts, rather than Redis and PostgreSQL up, every worker dead and the typo kept in stack.json."""
    saved = stack.load_settings()
    kept = saved.imports if saved else []
    for module in merged_imports(kept, imports):
        try:
            import_module(module)
        except UsageError as exc:
            where = (
                f" (kept from an earlier `lg stack up`; remove it from the imports in {stack.state_file} to drop it)"
                if module in kept
                else ""
            )
            raise UsageError(f"{exc}{where}; nothing was started") from None


@stack_app.command("down")
def stack_down(directory: DirOption = DEFAULT_DIR) -> None:
    """Stop every stack process (SIGTERM, then SIGKILL after 20 s); data is kept for the next up."""
    info = error_console()
    stack = LocalStack(directory)
    stopped = stack.down(progress=info.print)
    if stopped:
        info.print("stack stopped", highlight=False)
    elif not stack.was_started():
        # Run from another directory than `up` was: the stack is still running somewhere else.
        info.print(
            f"nothing was running in {stack.root}: no stack was started there; run `lg stack down` in the "
            "directory where you ran `lg stack up`, or pass --dir",
            highlight=False,
            soft_wrap=True,
        )
    else:
        info.print(f"nothing was running in {stack.root}", highlight=False)


@stack_app.command("status")
def stack_status(directory: DirOption = DEFAULT_DIR) -> None:
    """Each stack process: alive or dead, its pid and how many processes its group has (exit 1 if any is down)."""
    stack = LocalStack(directory)
    states = stack.status()
    started_here = stack.was_started() or any(state.alive or state.members for state in states)
    if not started_here:
        # First, before a table of stopped processes that would read as this stack being down.
        error_console().print(escape(_not_started_here(stack, "status")), highlight=False, soft_wrap=True)
    table = Table("process", "status", "pid", "processes", box=None, pad_edge=False)
    for state in states:
        colour = "green" if state.alive else "red"
        table.add_row(state.name, f"[{colour}]{state.label}[/]", str(state.pid or "-"), str(len(state.members)))
    output_console().print(table)
    try:
        settings, problem = stack.load_settings(), None
    except ConfigurationError as exc:  # damaged: the table above came from the pid files all the same
        settings, problem = None, str(exc)
    if settings is not None:
        output_console().print(f"flower {settings.flower_url}   env file {stack.env_file}", highlight=False)
    elif problem or started_here:
        error_console().print(escape(problem or _missing_state(stack, states)), highlight=False, soft_wrap=True)
    raise typer.Exit(0 if all(state.alive for state in states) else 1)


def _missing_state(stack: LocalStack, states: list[ProcessState]) -> str:
    """What ``status`` says when stack.json is not there."""
    if any(state.alive or state.members for state in states):
        return (
            f"{stack.state_file} is missing, so the ports of these processes are unknown; "
            f"`{stack.down_command}` stops them"
        )
    return f"{stack.state_file} is missing; the next `lg stack up` chooses ports afresh"


def _not_started_here(stack: LocalStack, command: str) -> str:
    """No stack was started in ``stack.root``: where the running ones are, else where to look."""
    elsewhere = running_stack_dirs(excluding=stack.root)
    where = (
        f"a stack is running in {', '.join(map(str, elsewhere))} (pass --dir)"
        if elsewhere
        else f"run `lg stack {command}` in the directory where you ran `lg stack up`, or pass --dir"
    )
    return f"no stack was started in {stack.root}; {where}"


@stack_app.command("logs")
def stack_logs(
    name: Annotated[str | None, typer.Argument(metavar="[NAME]", help=f"One of: {', '.join(SERVICES)}.")] = None,
    directory: DirOption = DEFAULT_DIR,
    lines: Annotated[int, typer.Option("--lines", "-n", min=1, max=100_000, help="Lines per log.")] = 40,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Then print lines as they are written, until Ctrl-C (as tail -f).")
    ] = False,
) -> None:
    """The last lines of one process's log, or of every log (and what follows, with --follow)."""
    stack = LocalStack(directory)
    names = [name] if name else list(SERVICES)
    found = [each for each in names if stack.log_file(each).exists()]
    if not found:
        fail(
            f"no log for {name or 'any process'} in {stack.root / 'logs'}: the stack was never started there "
            "(`lg stack up`)"
        )
    out = output_console()
    shown: dict[str, int] = {}  # how far each log was read, where following starts: no line is lost between
    for each in found:
        path = stack.log_file(each)
        if not name:
            out.print(f"[bold]== {each}[/] ({path})", highlight=False)
        text = path.read_bytes()
        shown[each] = len(text)
        for line in text.decode(errors="replace").splitlines()[-lines:]:
            out.print(line, markup=False, highlight=False, soft_wrap=True)
    if follow:
        try:
            _follow({each: stack.log_file(each) for each in found}, shown, labelled=not name)
        except KeyboardInterrupt:
            raise typer.Exit(0) from None


def _follow(paths: dict[str, Path], offsets: dict[str, int], *, labelled: bool, interval: float = 0.2) -> None:
    """Print what is appended to each log after ``offsets``, forever (the caller stops it on Ctrl-C).

    A log that shrinks was truncated or replaced: it is read again from its start. With several
    logs, a header names the process before its lines whenever the source changes, as tail -f does.
    """
    out = output_console()
    pending = dict.fromkeys(paths, b"")
    last = None
    while True:
        for name, path in paths.items():
            size = _size(path)
            if size < offsets[name]:
                offsets[name], pending[name] = 0, b""
            if size == offsets[name]:
                continue
            with path.open("rb") as handle:
                handle.seek(offsets[name])
                chunk = handle.read(size - offsets[name])
            offsets[name] += len(chunk)
            *complete, pending[name] = (pending[name] + chunk).split(b"\n")
            if complete and labelled and last != name:
                out.print(f"[bold]== {name}[/] ({path})", highlight=False)
                last = name
            for line in complete:
                out.print(line.decode(errors="replace"), markup=False, highlight=False, soft_wrap=True)
        time.sleep(interval)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def register(app: typer.Typer, runs_app: typer.Typer) -> None:
    """The ``littleghost.cli`` entry point: adds ``lg scheduler`` and ``lg stack``."""
    app.command("scheduler")(scheduler)
    app.add_typer(stack_app)


__all__ = ["register", "scheduler", "stack_app"]
