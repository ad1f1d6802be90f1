"""``lg runs retry`` and ``lg runs fork``: replay from the command line.

    lg runs retry RUN_ID
    lg runs retry-failed --since 2h [--status cancelled] [--limit N] [--dry-run]
    lg runs fork RUN_ID --from-step root/turn-2/model [--model ROLE_OR_TARGET]
                 [--setting temperature=0.2 ...] [--run-id NEW] [--deadline SECONDS]

``lg runs show RUN_ID`` lists the step keys to fork from. Both commands stream
the replayed part of the run as ``lg runs resume`` does (text to stdout, tool
calls and notes to stderr) and exit 0 only when it completes. Without a broker
the run executes in this process; with ``broker_url`` / ``LG_BROKER_URL`` it
executes on the workers and this command follows its events until it ends.

Registered through the ``littleghost.cli`` entry point (``register``), like the
other packages' commands, so the replay commands live next to lg_core.replay.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import typer
from rich.markup import escape

from lg_core import replay
from lg_core.cli_errors import UsageError
from lg_core.cli_output import EventPrinter, error_console, output_console, preview, report_outcome
from lg_core.cli_session import ImportOption, StoreOption, session
from lg_core.errors import Error
from lg_core.execution import Execution


class ReplayPrinter(EventPrinter):
    """EventPrinter that also announces the run_retried / run_forked marker."""

    def _on_run_retried(self, data: Mapping[str, Any]) -> None:
        error = data.get("previous_error") or {}
        reason = f": {error.get('name')}: {preview(error.get('message'), 80)}" if error else ""
        step = data.get("step") or ", ".join(data.get("rescheduled") or [])
        self.note(
            f"[magenta]retrying[/] step {escape(str(step))} "
            f"from the checkpoint of {escape(str(data.get('restored_from')))} "
            f"(it ended {escape(str(data.get('previous_outcome')))}{escape(reason)})"
        )

    def _on_run_forked(self, data: Mapping[str, Any]) -> None:
        changes = []
        if data.get("model"):
            changes.append(f"model {data['model']}")
        if data.get("settings"):
            changes.append(f"settings {json.dumps(data['settings'])}")
        self.note(
            f"[magenta]forked[/] run {escape(str(data.get('run_id')))} from {escape(str(data.get('parent_run_id')))} "
            f"at step {escape(str(data.get('from_step')))}" + escape("".join(f"; {c}" for c in changes))
        )


def runs_retry(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID")],
    store: StoreOption = None,
    imports: ImportOption = None,
) -> None:
    """Run a failed or cancelled run again from its last committed checkpoint (exit 1 unless it completes)."""
    with session(ctx, store, imports, durable=True, load_imports=True) as runtime:
        code = _replay(runtime, lambda on_event: replay.retry(run_id, on_event=on_event, runtime=runtime))
    raise typer.Exit(code)


def runs_retry_failed(
    ctx: typer.Context,
    since: Annotated[str, typer.Option("--since", metavar="AGE", help="Runs that ended in the last AGE: 30m, 2h, 1d.")],
    status: Annotated[
        list[str] | None,
        typer.Option("--status", help="failed (default) or cancelled; repeatable."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most N runs, oldest first.")] = 100,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the runs; retry none.")] = False,
    store: StoreOption = None,
    imports: ImportOption = None,
) -> None:
    """Retry every run that failed in the last AGE, e.g. after a provider outage (exit 1 unless every one was retried).

    With a broker each run is handed to the workers and this returns at once
    (follow them with `lg runs list`); without one they run here, one by one.
    A run that cannot be retried (its session moved on, it was retried already)
    is reported and skipped.
    """
    from lg_core.run_selection import parse_age

    statuses = tuple(status or ("failed",))
    parse_age(since, "--since")  # refused before the store is opened
    replay.check_retry_statuses(statuses)
    info = error_console()
    with session(ctx, store, imports, durable=True, load_imports=not dry_run) as runtime:
        records = replay.runs_to_retry(since, statuses=statuses, limit=limit, runtime=runtime)
        if not records:
            info.print(f"no {' or '.join(statuses)} runs ended in the last {escape(since)}", soft_wrap=True)
            raise typer.Exit(0)
        if dry_run:
            for record in records:
                info.print(f"would retry {record.id} ({record.status}{_error_note(record.error)})", soft_wrap=True)
            raise typer.Exit(0)
        retried = sum(_retry_one(runtime, record, info) for record in records)
    info.print(f"{retried} of {len(records)} run(s) retried", soft_wrap=True)
    raise typer.Exit(0 if retried == len(records) else 1)


def _retry_one(runtime: Any, record: Any, info: Any) -> bool:
    """Retry one run, saying what became of it: True once it is on the workers, or completed here."""
    try:
        result = replay.retry(record.id, runtime=runtime)
    except Exception as exc:  # noqa: BLE001 - this run only (a hook's own error too): the others are still retried
        reason = str(exc) if isinstance(exc, Error) else f"{type(exc).__name__}: {exc}"
        info.print(f"skipped {record.id}: {escape(reason)}", soft_wrap=True)
        return False
    if isinstance(result, Execution):
        info.print(f"retrying {record.id} on the workers", soft_wrap=True)
        return True
    info.print(f"retried {record.id}: {result.outcome}", soft_wrap=True)
    return bool(result.completed)


def _error_note(error: Any) -> str:
    if not isinstance(error, Mapping) or not error.get("name"):
        return ""
    return escape(f": {error['name']}: {preview(error.get('message'), 80)}")


def runs_fork(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID")],
    from_step: Annotated[
        str,
        typer.Option(
            "--from-step", metavar="STEP", help="Step key to continue from (`lg runs show RUN_ID` lists them)."
        ),
    ],
    model: Annotated[
        str | None, typer.Option("--model", metavar="ROLE_OR_TARGET", help="Use this model in the new run.")
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--setting", metavar="KEY=VALUE", help="Change a model setting (repeatable; VALUE is JSON or text)."
        ),
    ] = None,
    new_run_id: Annotated[
        str | None, typer.Option("--run-id", metavar="ID", help="Id for the new run (default: random).")
    ] = None,
    deadline: Annotated[
        float | None,
        typer.Option("--deadline", metavar="SECONDS", min=0.001, help="A new deadline, SECONDS from now."),
    ] = None,
    store: StoreOption = None,
    imports: ImportOption = None,
) -> None:
    """Start a new run with RUN_ID's history before STEP and continue it live (exit 1 unless it completes)."""
    changes = parse_settings(settings or [])
    options: dict[str, Any] = {"run_id": new_run_id, "model": model, "settings": changes or None}
    if deadline is not None:
        options["deadline"] = deadline
    with session(ctx, store, imports, durable=True, load_imports=True) as runtime:
        code = _replay(
            runtime, lambda on_event: replay.fork(run_id, from_step, on_event=on_event, runtime=runtime, **options)
        )
    raise typer.Exit(code)


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """``["temperature=0.2", "tone=dry"]`` -> ``{"temperature": 0.2, "tone": "dry"}`` (JSON values, else text)."""
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--setting expects KEY=VALUE (for example temperature=0.2), got {pair!r}")
        try:
            settings[key.strip()] = json.loads(text)
        except json.JSONDecodeError:
            settings[key.strip()] = text
    return settings


def _replay(runtime: Any, action: Callable[[Any], Any]) -> int:
    """Run ``action`` rendering its events; on workers, follow the execution to its end."""
    out, info = output_console(), error_console()
    printer = ReplayPrinter(out, info)
    distributed = bool(runtime.configuration.broker_url)
    try:
        result = action(None if distributed else printer)
        if isinstance(result, Execution):
            for event in result.events():
                printer(event)
            result = result.wait()
    finally:
        printer.finish()
    return report_outcome(result, info)


def register(app: typer.Typer, runs_app: typer.Typer) -> None:
    """The ``littleghost.cli`` entry point: add ``lg runs retry`` and ``lg runs fork``."""
    runs_app.command("retry")(runs_retry)
    runs_app.command("retry-failed")(runs_retry_failed)
    runs_app.command("fork")(runs_fork)


__all__ = ["ReplayPrinter", "parse_settings", "register", "runs_fork", "runs_retry", "runs_retry_failed"]
