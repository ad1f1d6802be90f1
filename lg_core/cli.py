"""``lg``: ask agents, inspect, resume and cancel stored runs, and run the offline demo.

    lg demo
    lg ask myapp.agents:SupportAgent "Can I get a refund?" --store sqlite:///runs.db
    lg ask myapp.agents:SupportAgent "Can I get a refund?" --workers   (on the Celery workers)
    lg runs list --store sqlite:///runs.db
    lg runs show RUN_ID        lg runs events RUN_ID
    lg runs resume RUN_ID      lg runs cancel RUN_ID

The run store is ``--store`` on the command, else ``lg --store URL ...``, else
``LG_RUN_STORE``, else in-memory (which ``lg runs`` refuses: nothing in it
outlives the process). Application modules named by ``--import`` (repeatable,
global or per command) and ``LG_IMPORTS`` are imported before an agent runs or
a run resumes, so their scripted models and agent classes are registered.

Rendering lives in :mod:`lg_core.cli_output`, the command's configuration and store checks in
:mod:`lg_core.cli_session`, application imports in :mod:`lg_core.cli_imports`. Output: a run's
answer goes to stdout; tool calls, notes and the final status line go to stderr, so
``lg ask ... > answer.txt`` keeps only the answer. On a terminal the text streams as it
arrives; into a file or a pipe the answer is written once the run finished, and the text a
model writes before its tool calls goes to stderr with them.
Exit codes: 0 success, 1 a run ended without completing, 2 a usage error
(unknown run, bad store URL, import failure, bad input), printed as one red
line without a traceback.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from lg_core.cli_agent_events import participant_events, pathed_events_table
from lg_core.cli_ask import ask_here, ask_on_workers
from lg_core.cli_errors import UsageError, fail
from lg_core.cli_imports import load_entrypoint
from lg_core.cli_output import (
    EventPrinter,
    describe_run,
    error_console,
    events_table,
    iso,
    output_console,
    record_json,
    report_outcome,
    resume_streaming,
    runs_table,
    status_text,
    step_json,
    steps_table,
    trajectory_table,
    writes_to_terminal,
)
from lg_core.cli_session import GlobalOptions, ImportOption, JsonOption, StoreOption, session
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


# -- command-line input ------------------------------------------------------------------


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
    ctx.obj = GlobalOptions(store=store, imports=list(imports or []))


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
        typer.Argument(
            metavar="MODULE:CLASS",
            help="The agent (or Workflow, Swarm, Graph) class, e.g. myapp.agents:SupportAgent.",
        ),
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
    workers: Annotated[
        bool,
        typer.Option(
            "--workers",
            help="Run on the Celery workers of the configured broker (LG_BROKER_URL) instead of in this process.",
        ),
    ] = False,
) -> None:
    """Run an agent or an assembly on MESSAGE and print its answer (exit 1 unless the run completed).

    It runs in this process unless --workers is given; a line on stderr says which.
    """
    options = {
        "context": parse_context(context),
        "actor_id": actor_id,
        "session_id": session_id,
        "run_id": run_id,
    }
    options = {name: value for name, value in options.items() if value is not None}
    out, info = output_console(), error_console()
    with session(
        ctx, store, imports, durable=False, load_imports=True, before_open=lambda: load_entrypoint(target)
    ) as runtime:
        where = ask_on_workers if workers else ask_here
        answer_only = stream and not writes_to_terminal(out)  # > answer.txt keeps only the answer
        run = where(
            runtime, load_entrypoint(target), message, options, out, info, stream=stream, answer_only=answer_only
        )
        code = report_outcome(run, info)
    raise typer.Exit(code)


def _storable_count(value: int) -> int:
    """The store's largest count, checked here rather than as the option's range, which help would print."""
    if value > MAX_COUNT:
        raise typer.BadParameter(f"{value} is larger than the store can count ({MAX_COUNT})")
    return value


@runs_app.command("list")
def runs_list(
    ctx: typer.Context,
    status: Annotated[
        str | None,
        typer.Option("--status", help="pending, running, completed, failed, partial or cancelled."),
    ] = None,
    limit: Annotated[
        int,
        typer.Option("--limit", min=1, metavar="N", callback=_storable_count, help="At most N runs, newest first."),
    ] = 20,
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
    """A run's status, outcome, input, steps and message count; an assembly run's trajectory."""
    with session(ctx, store, durable=True, load_imports=False) as runtime:
        record = runtime.store.load_run(run_id_to_look_up(run_id))
        steps = [s for s in runtime.store.load_steps(run_id) if s.kind != "start"]
        message_count = sum(len(runtime.store.load_messages(frame.id)) for frame in runtime.store.load_frames(run_id))
    trajectory = (record.result or {}).get("steps")  # a finished Workflow, Swarm or Graph run's
    if as_json:
        data = {
            **record_json(record),
            "invocation": record.invocation,
            "message_count": message_count,
            "steps": [step_json(s) for s in steps],
            **({"trajectory": trajectory} if isinstance(trajectory, list) else {}),
        }
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    out = output_console()
    for line in describe_run(record, message_count):
        out.print(line, soft_wrap=True)
    out.print()
    out.print(steps_table(steps) if steps else "no steps")
    if isinstance(trajectory, list) and trajectory:
        out.print()
        out.print("[bold]trajectory[/]")
        out.print(trajectory_table(trajectory))


@runs_app.command("events")
def runs_events(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID")],
    after: Annotated[
        int,
        typer.Option(
            "--after", metavar="SEQ", min=0, callback=_storable_count, help="Only events after sequence number SEQ."
        ),
    ] = 0,
    agents: Annotated[
        bool,
        typer.Option(
            "--agents", help="Also list an assembly's participants' events (its child runs'), under their path."
        ),
    ] = False,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """A run's durable event log (token deltas are not stored)."""
    with session(ctx, store, durable=True, load_imports=False) as runtime:
        runtime.store.load_run(run_id_to_look_up(run_id))
        pathed = participant_events(runtime.store, run_id, after) if agents else None
        events = [item.event for item in pathed] if pathed is not None else runtime.store.load_events(run_id, after)
    if as_json:
        rows = [{"seq": e.seq, "type": e.type, "created_at": iso(e.created_at), "data": e.data} for e in events]
        if pathed is not None:
            rows = [
                {"agent": item.path, "run_id": item.event.run_id, **row} for item, row in zip(pathed, rows, strict=True)
            ]
        typer.echo(json.dumps(rows, indent=2, default=str))
        return
    if not events:
        error_console().print(f"no events after {after}")
        return
    output_console().print(events_table(events) if pathed is None else pathed_events_table(pathed))


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
