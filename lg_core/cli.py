"""``lg``: ask agents, inspect, resume and cancel stored runs, and run the offline demo.

    lg demo
    lg ask myapp.agents:SupportAgent "Can I get a refund?" --store sqlite:///runs.db
    lg runs list --store sqlite:///runs.db
    lg runs show RUN_ID        lg runs events RUN_ID
    lg runs resume RUN_ID      lg runs cancel RUN_ID

The run store is ``--store`` on the command, else ``lg --store URL ...``, else
``LG_RUN_STORE``, else in-memory (which ``lg runs`` refuses: nothing in it
outlives the process). Application modules named by ``--import`` (repeatable,
global or per command) and ``LG_IMPORTS`` are imported before an agent runs or
a run resumes, so their scripted models and agent classes are registered.

Rendering lives in :mod:`lg_core.cli_output`. Output: a run's answer goes to stdout; tool calls, notes and the final status
line go to stderr, so ``lg ask ... > answer.txt`` keeps only the answer. On a terminal the
text streams as it arrives; into a file or a pipe the answer is written once the run
finished, and the text a model writes before its tool calls goes to stderr with them.
Exit codes: 0 success, 1 a run ended without completing, 2 a usage error
(unknown run, bad store URL, import failure, bad input), printed as one red
line without a traceback.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import stat
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from lg_core.agent import Agent
from lg_core.cli_output import (
    EventPrinter,
    describe_run,
    error_console,
    events_table,
    iso,
    output_console,
    preview,
    record_json,
    report_outcome,
    resume_streaming,
    runs_table,
    status_text,
    step_json,
    steps_table,
    stream_run,
    writes_to_terminal,
)
from lg_core.config import build_configuration, with_configuration
from lg_core.errors import (
    ConfigurationError,
    InvocationError,
    RunNotFoundError,
    RunStateError,
    StoreUnavailableError,
)
from lg_core.run_ids import run_id_to_look_up
from lg_core.store.records import MAX_COUNT, RUN_ACTIVE, RUN_TERMINAL
from lg_core.urls import safe_url


class UsageError(Exception):
    """A problem with what the user asked for: one red line on stderr, exit code 2."""


_USAGE_ERRORS = (UsageError, ConfigurationError, InvocationError, RunNotFoundError, RunStateError)
# sysexits' EX_TEMPFAIL: the database went away in the middle of the command; the same command
# works once it is back (a script or supervisor can tell this from a usage error and retry).
EXIT_STORE_UNAVAILABLE = 75


class _Group(TyperGroup):
    """The root command group: maps usage errors to one line and exit code 2."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _USAGE_ERRORS as exc:
            fail(str(exc) or type(exc).__name__)
        except StoreUnavailableError as exc:
            fail(str(exc), code=EXIT_STORE_UNAVAILABLE)
        except KeyboardInterrupt:
            error_console().print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None


def fail(message: str, code: int = 2) -> None:
    """Print ``message`` as one red line on stderr and exit with ``code``."""
    error_console().print(f"[bold red]error:[/] [red]{escape(message)}[/]", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


# -- global options, configuration and imports --------------------------------------------


@dataclass
class _Options:
    store: str | None = None
    imports: list[str] = field(default_factory=list)


StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="Run store URL, e.g. sqlite:///runs.db (default: LG_RUN_STORE).",
    ),
]
ImportOption = Annotated[
    list[str] | None,
    typer.Option("--import", metavar="MODULE", help="Import MODULE first (repeatable); LG_IMPORTS adds more."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@contextmanager
def session(
    ctx: typer.Context,
    store: str | None,
    imports: list[str] | None = None,
    *,
    durable: bool,
    load_imports: bool,
    before_open: Callable[[], Any] | None = None,
    **settings: Any,
) -> Iterator[Any]:
    """A Configuration (and its Runtime) for one command, current for the block and closed after it.

    ``settings`` are further Configuration values from the command's options
    (e.g. ``broker_url`` for ``lg worker --broker``); None means "not given".
    ``before_open`` runs once the imports are loaded and before the store is
    opened, so a command whose arguments are wrong (an agent that does not
    exist) fails without creating a store file.
    """
    options = ctx.find_object(_Options) or _Options()
    url = store or options.store
    given = {key: value for key, value in settings.items() if value is not None}
    config = build_configuration(**({"run_store": url} if url else {}), **given)
    origin = "--store" if url else _configured_store()
    if durable:
        require_durable_store(config.run_store, origin)
    else:  # a new run store may be created, but not inside another application's database
        refuse_foreign_sqlite_store(config.run_store, origin)
    if load_imports:
        project_on_path()
        for module in config.imports:
            try:
                import_module(module)
            except UsageError as exc:  # not on the command line: say where the name comes from
                raise UsageError(f"{exc}; it is named by {_configured_imports()}") from None
        for module in [*options.imports, *(imports or [])]:
            import_module(module)
    try:
        if before_open is not None:
            before_open()
        runtime = open_runtime(config)
        with with_configuration(config):
            yield runtime
    finally:
        config.close()


def _configured_imports() -> str:
    """Where the configuration's ``imports`` come from: the environment, else the config file."""
    from lg_core.config_sources import config_file_path

    if os.environ.get("LG_IMPORTS"):
        return "$LG_IMPORTS"
    path = config_file_path()
    return f"imports in {path}" if path is not None else "the configuration's imports"


def open_runtime(config: Any) -> Any:
    from sqlalchemy.exc import SQLAlchemyError

    from lg_core.store.transient_errors import driver_reason

    try:
        return config.runtime()
    except SQLAlchemyError as exc:
        config.close()
        raise UsageError(f"cannot open the run store {safe_url(config.run_store)}: {driver_reason(exc)}") from None


def _configured_store() -> str:
    """Where the configuration's ``run_store`` comes from, for a message about a bad one."""
    from lg_core.config_sources import config_file_path

    if os.environ.get("LG_RUN_STORE"):
        return "$LG_RUN_STORE"
    path = config_file_path()
    return f"run_store in {path}" if path is not None else "--store / LG_RUN_STORE"


def require_durable_store(url: str, origin: str = "--store / LG_RUN_STORE") -> None:
    """``lg runs`` reads a store another process wrote: refuse in-memory and missing SQLite files.

    ``origin`` says where ``url`` came from (``--store``, ``$LG_RUN_STORE``, a config file).
    """
    from lg_core.store.store_urls import parse_store_url

    parsed = parse_store_url(
        url, "{url!r} is not a database URL{reason} (from " + origin + "); use sqlite:///path/to/runs.db", UsageError
    )
    if parsed.get_backend_name() != "sqlite":
        return
    if parsed.database in (None, "", ":memory:"):
        raise UsageError(
            "no run store configured: runs live in a durable store; pass --store sqlite:///path/to/runs.db "
            "or postgresql+psycopg://USER@HOST/DB (or set LG_RUN_STORE) naming the store your runs were "
            "written to; for the local stack, `. .lg/stack/env` in the directory of `lg stack up` sets it"
        )
    if _store_file_stat(Path(parsed.database), origin) is None:
        raise UsageError(f"no run store at {parsed.database}: the file does not exist (check {origin})")
    refuse_foreign_sqlite_store(url, origin)


def _store_file_stat(path: Path, origin: str) -> os.stat_result | None:
    """The SQLite store file's status, None if it does not exist; a path the system refuses (a name
    longer than the file system allows, a directory that cannot be searched) is a UsageError."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        advice = "; choose a shorter path" if exc.errno == errno.ENAMETOOLONG else ""
        raise UsageError(
            f"cannot use the run store file {_short_path(path)} (from {origin}): {exc.strerror or exc}{advice}"
        ) from None


def _short_path(path: Path, limit: int = 120) -> str:
    """``path`` for a one-line message: a path thousands of characters long is cut in the middle."""
    text = str(path)
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}...{text[-limit // 2 :]} ({len(text)} characters)"


def refuse_foreign_sqlite_store(url: str, origin: str) -> None:
    """Refuse a SQLite file that holds another database's tables (a typo in --store, most likely):
    opening it as a run store would add the store's tables to it. A new or empty file is fine.
    ``origin`` says where ``url`` came from."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return  # opening the store says what is wrong with the URL
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:") or "uri" in parsed.query:
        return
    if _foreign_sqlite_database(Path(parsed.database), origin):
        raise UsageError(
            f"{parsed.database} is not a LittleGhost run store (it has tables, but no lg_runs); "
            f"check {origin}: opening it would add the run store's tables to it"
        )


def _foreign_sqlite_database(path: Path, origin: str) -> bool:
    """A SQLite database with tables but none of a run store's: most likely a typo in --store."""
    import sqlite3
    from contextlib import closing

    status = _store_file_stat(path, origin)
    if status is None or not stat.S_ISREG(status.st_mode) or status.st_size == 0:
        return False  # an empty file holds nobody's data; a directory is the store's own error
    try:
        with closing(sqlite3.connect(path)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error:
        return False  # not a database at all: opening the store says so
    return bool(tables) and "lg_runs" not in tables


def project_on_path() -> None:
    """Make the working directory importable, as ``python -m`` does (a console script does not)."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


def import_module(name: str) -> Any:
    """Import an application module; failures become one-line UsageErrors."""
    project_on_path()
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise UsageError(
                f"cannot import module {name!r}: no module named {exc.name!r} (check the name and PYTHONPATH)"
            ) from None
        raise UsageError(f"importing {name!r} failed: {exc}{_where(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - any failure inside the module is a usage error here
        raise UsageError(f"importing {name!r} failed: {type(exc).__name__}: {exc}{_where(exc)}") from None


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def load_agent(target: str) -> type[Agent]:
    """The Agent subclass named ``module:QualName``."""

    module_name, sep, qualname = target.partition(":")
    if not sep or not module_name or not qualname:
        raise UsageError(f"expected MODULE:CLASS (for example myapp.agents:SupportAgent), got {target!r}")
    module = import_module(module_name)
    value: Any = module
    for part in qualname.split("."):
        value = getattr(value, part, None)
        if value is None:
            agents = sorted(
                n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, Agent) and v is not Agent
            )
            hint = f"; agents there: {', '.join(agents)}" if agents else ""
            raise UsageError(f"module {module_name!r} has no attribute {qualname!r}{hint}")
    if value is Agent:
        raise UsageError(
            f"{target} is the Agent base class, which has no model or prompt of its own; name a "
            "subclass of it (for example myapp.agents:SupportAgent)"
        )
    if not (isinstance(value, type) and issubclass(value, Agent)):
        raise UsageError(f"{target} is not an Agent subclass (it is {type(value).__name__} {preview(repr(value), 60)})")
    return value


def parse_context(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--context is not valid JSON ({exc.msg} at position {exc.pos}): {text[:60]!r}") from None
    if not isinstance(value, dict):
        raise UsageError(f'--context must be a JSON object like \'{{"tier": "gold"}}\', got {type(value).__name__}')
    return value


# -- the app -------------------------------------------------------------------------------

app = typer.Typer(
    cls=_Group,
    name="lg",
    help="LittleGhost: LLM agents whose runs survive crashes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
runs_app = typer.Typer(no_args_is_help=True, help="Inspect, resume and cancel stored runs.", rich_markup_mode=None)
app.add_typer(runs_app, name="runs")


def _version(value: bool) -> None:
    if value:
        from lg_core import __version__

        typer.echo(f"lg (littleghost) {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    store: StoreOption = None,
    imports: ImportOption = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """LittleGhost: LLM agents whose runs survive crashes."""
    ctx.obj = _Options(store=store, imports=list(imports or []))


@app.command()
def demo(
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="Keep the demo's run store and tool journal in DIR (default: a temporary directory).",
        ),
    ] = None,
) -> None:
    """Offline demo: stream an answer, then kill a run with SIGKILL and resume it."""
    from lg_core.demo.walkthrough import run_demo

    if directory is not None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file of that name, no permission, a missing parent on a read-only disk
            fail(f"cannot use --dir {directory}: {exc.strerror or exc}")
    raise typer.Exit(run_demo(output_console(piped_width=100), directory=directory))


@app.command()
def ask(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(metavar="MODULE:CLASS", help="The agent class, e.g. myapp.agents:SupportAgent."),
    ],
    message: Annotated[str, typer.Argument(metavar="MESSAGE", help="The user's message.")],
    store: StoreOption = None,
    stream: Annotated[bool, typer.Option("--stream/--no-stream", help="Print text as it arrives.")] = True,
    context: Annotated[
        str | None, typer.Option("--context", metavar="JSON", help="Run context as a JSON object.")
    ] = None,
    actor_id: Annotated[str | None, typer.Option("--actor-id", metavar="ID")] = None,
    session_id: Annotated[str | None, typer.Option("--session-id", metavar="ID")] = None,
    run_id: Annotated[
        str | None,
        typer.Option("--run-id", metavar="ID", help="Id for the new run (default: random)."),
    ] = None,
    imports: ImportOption = None,
) -> None:
    """Run an agent on MESSAGE and print its answer (exit 1 unless the run completed)."""
    options = {
        "context": parse_context(context),
        "actor_id": actor_id,
        "session_id": session_id,
        "run_id": run_id,
    }
    options = {name: value for name, value in options.items() if value is not None}
    out, info = output_console(), error_console()
    with session(ctx, store, imports, durable=False, load_imports=True, before_open=lambda: load_agent(target)):
        agent_class = load_agent(target)
        if stream:
            answer_only = not writes_to_terminal(out)  # > answer.txt keeps only the answer
            run = stream_run(agent_class.stream_ask(message, **options), out, info, answer_only=answer_only)
        else:
            run = agent_class.ask(message, **options)
            if run.response:
                out.print(run.response, markup=False, soft_wrap=True)
        code = report_outcome(run, info)
    raise typer.Exit(code)


@runs_app.command("list")
def runs_list(
    ctx: typer.Context,
    status: Annotated[
        str | None,
        typer.Option("--status", help="pending, running, completed, failed, partial or cancelled."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=MAX_COUNT, help="At most N runs, newest first.")] = 20,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stored runs, newest first."""
    statuses = ("pending", RUN_ACTIVE, *RUN_TERMINAL)
    if status is not None and status not in statuses:
        raise UsageError(f"--status must be one of {', '.join(statuses)}; got {status!r}")
    with session(ctx, store, durable=True, load_imports=False) as runtime:
        records = runtime.list_runs(status=status, limit=limit)
        where = safe_url(runtime.configuration.run_store)
    if as_json:
        typer.echo(json.dumps([record_json(r) for r in records], indent=2))
        return
    if not records:
        error_console().print(f"no {status + ' ' if status else ''}runs in {escape(where)}", soft_wrap=True)
        return
    output_console().print(runs_table(records))


@runs_app.command("show")
def runs_show(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """A run's status, outcome, input, steps and message count."""
    with session(ctx, store, durable=True, load_imports=False) as runtime:
        record = runtime.store.load_run(run_id_to_look_up(run_id))
        steps = [s for s in runtime.store.load_steps(run_id) if s.kind != "start"]
        message_count = sum(len(runtime.store.load_messages(frame.id)) for frame in runtime.store.load_frames(run_id))
    if as_json:
        data = {
            **record_json(record),
            "invocation": record.invocation,
            "message_count": message_count,
            "steps": [step_json(s) for s in steps],
        }
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    out = output_console()
    for line in describe_run(record, message_count):
        out.print(line, soft_wrap=True)
    out.print()
    out.print(steps_table(steps) if steps else "no steps")


@runs_app.command("events")
def runs_events(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID")],
    after: Annotated[
        int,
        typer.Option("--after", metavar="SEQ", min=0, max=MAX_COUNT, help="Only events after sequence number SEQ."),
    ] = 0,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """A run's durable event log (token deltas are not stored)."""
    with session(ctx, store, durable=True, load_imports=False) as runtime:
        runtime.store.load_run(run_id_to_look_up(run_id))
        events = runtime.store.load_events(run_id, after)
    if as_json:
        rows = [{"seq": e.seq, "type": e.type, "created_at": iso(e.created_at), "data": e.data} for e in events]
        typer.echo(json.dumps(rows, indent=2, default=str))
        return
    if not events:
        error_console().print(f"no events after {after}")
        return
    output_console().print(events_table(events))


@runs_app.command("resume")
def runs_resume(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID")],
    force: Annotated[
        bool,
        typer.Option("--force", help="Resume even if the holder looks alive (e.g. it ran on another host)."),
    ] = False,
    store: StoreOption = None,
    imports: ImportOption = None,
) -> None:
    """Continue a run whose process died, without redoing committed steps (exit 1 unless it completes)."""
    out, info = output_console(), error_console()
    with session(ctx, store, imports, durable=True, load_imports=True) as runtime:
        record = runtime.store.load_run(run_id_to_look_up(run_id))
        if record.finished:
            info.print(
                f"run {run_id} already finished: {status_text(record.status)}; nothing to resume",
                soft_wrap=True,
            )
            raise typer.Exit(0 if record.status == "completed" else 1)
        printer = EventPrinter(out, info, answer_only=not writes_to_terminal(out))
        run = resume_streaming(runtime, run_id, printer, force=force)
        code = report_outcome(run, info)
    raise typer.Exit(code)


@runs_app.command("cancel")
def runs_cancel(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID")],
    store: StoreOption = None,
) -> None:
    """Ask the process running RUN_ID to stop it at its next step boundary."""
    from lg_core.lease_holders import holder_is_dead

    info = error_console()
    with session(ctx, store, durable=True, load_imports=False) as runtime:
        requested = runtime.cancel(run_id)
        record = runtime.store.load_run(run_id)
    if not requested:
        info.print(
            f"run {run_id} already finished: {status_text(record.status)}; nothing to cancel",
            soft_wrap=True,
        )
        return
    if record.finished:
        info.print(f"run {run_id} {status_text(record.status)}", soft_wrap=True)
    elif record.holder and holder_is_dead(record.holder):
        info.print(
            f"cancellation recorded for run {run_id}; its process ({escape(record.holder)}) is gone, so "
            f"`lg runs resume {run_id}` will end it as cancelled",
            soft_wrap=True,
        )
    else:
        info.print(
            f"cancellation requested for run {run_id}; it stops at its next step boundary",
            soft_wrap=True,
        )


@runs_app.command("prune")
def runs_prune(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than", metavar="AGE", help="Delete runs that finished longer ago than AGE: 90m, 12h, 30d, 2w."
        ),
    ],
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status", help="Only runs with this outcome (repeatable): completed, failed, partial, cancelled."
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would be deleted; delete nothing.")] = False,
    store: StoreOption = None,
) -> None:
    """Delete finished runs older than AGE with their steps, messages and events (a retention period)."""
    from lg_core.retention import check_statuses, prune_runs
    from lg_core.run_selection import parse_age

    parse_age(older_than, "--older-than")  # a bad age or status is refused before the store is opened
    check_statuses(status or None)
    with session(ctx, store, durable=True, load_imports=False) as runtime:
        report = prune_runs(older_than, statuses=status or None, dry_run=dry_run, runtime=runtime)
        where = safe_url(runtime.configuration.run_store)
    verb = "would delete" if dry_run else "deleted"
    error_console().print(
        f"{verb} {report.runs} run(s) and {report.batches} finished batch(es) older than {escape(older_than)} "
        f"from {escape(where)}",
        soft_wrap=True,
    )


def load_plugins(target: typer.Typer = app) -> None:
    """Add the commands of installed packages (``littleghost.cli`` entry points).

    Each entry point is a function ``register(app, runs_app)``. This is how
    ``lg worker``, ``lg scheduler``, ``lg batch`` and ``lg stack`` join the CLI
    while lg_core never imports lg_workers or lg_scheduler.
    """
    from importlib.metadata import entry_points

    for entry in sorted(entry_points(group="littleghost.cli"), key=lambda e: e.name):
        try:
            entry.load()(target, runs_app)
        except Exception as exc:  # noqa: BLE001 - one broken plugin must not take down every command
            error_console().print(f"[yellow]warning:[/] the {entry.name!r} commands are unavailable: {exc!r}")


def show_configuration_warnings() -> None:
    """Print a ConfigurationWarning as one ``warning:`` line, like the CLI's own messages.

    Python's default format adds the file and line of LittleGhost's source,
    which says nothing to someone fixing their environment.
    """
    from lg_core.config import ConfigurationWarning

    default = warnings.showwarning

    def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if issubclass(category, ConfigurationWarning):
            error_console().print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False)
        else:
            default(message, category, *args, **kwargs)

    warnings.showwarning = show


def main() -> None:
    """Console-script entry point (``lg``)."""
    show_configuration_warnings()
    load_plugins()
    app()


if __name__ == "__main__":
    # ``python -m lg_core.cli`` runs this file as ``__main__``, a second copy of the module: the
    # plugins import lg_core.cli, so run that one, or their UsageErrors would escape this copy's
    # _Group as tracebacks.
    from lg_core.cli import main as _main

    _main()
