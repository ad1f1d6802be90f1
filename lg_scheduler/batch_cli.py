"""``lg batch``: submit a JSONL file of inputs as runs, and follow batches from any process.

    lg batch submit myapp.agents:SupportAgent inputs.jsonl --concurrency 50 --out results.jsonl
    lg batch submit ... --rate-limit 600/min --store postgresql+psycopg://... --broker redis://...
    lg batch status BATCH_ID          lg batch list

Submitting the same command again resumes the batch (see lg_scheduler.batch).
The batch id, a summary and the progress bar (on a terminal) go to stderr;
``--json`` prints the report on stdout. Exit codes: 0 every item completed,
1 some item did not complete, 2 a usage error (nothing was submitted).

Installed as the ``batch`` entry point of ``littleghost.cli``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from lg_core.cli_errors import fail
from lg_core.cli_imports import load_agent
from lg_core.cli_output import ago, error_console, iso, local_time, output_console
from lg_core.cli_session import ImportOption, JsonOption, StoreOption, session
from lg_core.lease_holders import holder_is_dead
from lg_core.store.records import MAX_COUNT, BatchRecord
from lg_scheduler.batch import BatchReport, load_status, submit_batch
from lg_scheduler.batch_inputs import BatchInputError
from lg_scheduler.batch_output import ResultWriteError

BrokerOption = Annotated[
    str | None,
    typer.Option(
        "--broker",
        metavar="URL",
        help="Celery broker (Redis) URL: runs go to workers (default: LG_BROKER_URL; none: threads here).",
    ),
]


def register(app: typer.Typer, runs_app: typer.Typer) -> None:
    """Add ``lg batch submit|status|list``."""
    batch_app = typer.Typer(
        no_args_is_help=True,
        help="Run a JSONL file of inputs as runs with a concurrency and rate limit; resume and follow batches.",
        rich_markup_mode=None,
    )
    batch_app.command("submit")(submit)
    batch_app.command("status")(status)
    batch_app.command("list")(list_batches)
    app.add_typer(batch_app, name="batch")


def submit(
    ctx: typer.Context,
    target: Annotated[
        str, typer.Argument(metavar="MODULE:CLASS", help="The agent class, e.g. myapp.agents:SupportAgent.")
    ],
    inputs: Annotated[
        Path,
        typer.Argument(metavar="INPUTS.jsonl", help='One input per line: a JSON string or an object with "message".'),
    ],
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", metavar="N", help="At most N runs in flight.")
    ] = 10,
    rate_limit: Annotated[
        str | None,
        typer.Option(
            "--rate-limit",
            metavar="N/s|N/min|N/h",
            help="At most N model calls per period on each provider connection, shared by every run limited on it.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="PATH", help="Write one result per line (JSONL) as items finish."),
    ] = None,
    batch_id: Annotated[
        str | None,
        typer.Option(
            "--batch-id", metavar="ID", help="Name the batch (default: a hash of the agent and the input file)."
        ),
    ] = None,
    skip_invalid: Annotated[
        bool,
        typer.Option(
            "--skip-invalid", help="Run the valid lines and report invalid ones as results, instead of refusing."
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Take the batch over even if its previous submitter looks alive (e.g. on another host)."
        ),
    ] = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar on a terminal.")
    ] = True,
    max_line_bytes: Annotated[
        str,
        typer.Option(
            "--max-line-bytes",
            metavar="SIZE",
            help="Longest input line, e.g. 1048576 or 4MiB; a longer line is that item's error.",
        ),
    ] = "1MiB",
    store: StoreOption = None,
    broker: BrokerOption = None,
    imports: ImportOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the batch report as JSON on stdout.")] = False,
) -> None:
    """Run every line of INPUTS as a run of MODULE:CLASS; submitting again resumes the batch."""
    info = error_console()
    with session(ctx, store, imports, durable=False, load_imports=True, broker_url=broker) as runtime:
        if runtime.store.in_memory:
            fail(
                "a batch needs a durable run store to be resumable and visible to `lg batch status`; "
                "pass --store sqlite:///runs.db or postgresql+psycopg://... (or set LG_RUN_STORE)"
            )
        agent_class = load_agent(target)
        try:
            report = submit_batch(
                agent_class,
                inputs,
                concurrency=concurrency,
                rate_limit=rate_limit,
                out=out,
                batch_id=batch_id,
                progress=progress,
                skip_invalid=skip_invalid,
                force=force,
                on_start=lambda r: _announce(r, info),
                keep_results=False,  # the report printed here has none: the lines go to --out only
                max_line_bytes=max_line_bytes,
            )
        except ResultWriteError as exc:
            fail(
                f"{exc}; the batch stopped (what finished is kept in the run store): free some space or pass "
                "another --out, then submit the same command again to resume it",
                code=1,
            )
        except BatchInputError as exc:
            for problem in exc.problems[:20]:
                info.print(escape(str(problem)), soft_wrap=True, highlight=False)
            if len(exc.problems) > 20:
                info.print(f"... and {len(exc.problems) - 20} more", highlight=False)
            fail(_invalid_lines(inputs, exc))
    if as_json:
        data = {k: v for k, v in asdict(report).items() if k != "results"}
        typer.echo(json.dumps({**data, "out": None if report.out is None else str(report.out)}, indent=2))
    _summary(report, info)
    raise typer.Exit(0 if report.ok else 1)


def _invalid_lines(inputs: Path, exc: BatchInputError) -> str:
    count = len(exc.problems)
    lines = f"{inputs} has {count} invalid line{'s' if count > 1 else ''}"
    if exc.batch_id is None:
        return (
            f"{lines}; nothing was submitted (fix them, "
            "or pass --skip-invalid to run the rest and report these as invalid)"
        )
    return (
        f"{lines}, which batch {exc.batch_id} skipped when it was submitted with --skip-invalid; pass --skip-invalid "
        "again to resume it (nothing was submitted now; a fixed file would be a new batch, running every item again)"
    )


def _announce(report: BatchReport, info: Any) -> None:
    to_start = report.total - report.invalid - report.already_finished - report.waited
    parts = [f"{report.total} items"]
    if report.already_finished:
        parts.append(f"{report.already_finished} already finished")
    if report.waited:
        parts.append(
            f"{report.waited} still in flight" + (f" ({report.resumed} resumed here)" if report.resumed else "")
        )
    parts.append(f"{to_start} to start")
    info.print(f"batch [bold]{report.batch_id}[/]: {', '.join(parts)}", soft_wrap=True, highlight=False)


def _summary(report: BatchReport, info: Any) -> None:
    colour = "green" if report.ok else "red"
    outcomes = ", ".join(f"{n} {name}" for name, n in sorted(report.outcomes.items()))
    where = f"; results in {escape(str(report.out))}" if report.out else ""
    info.print(
        f"[{colour}]batch {report.batch_id}: {report.completed}/{report.total} completed[/] "
        f"({outcomes or 'nothing to do'}){where}",
        soft_wrap=True,
        highlight=False,
    )


def status(
    ctx: typer.Context,
    batch_id: Annotated[str, typer.Argument(metavar="BATCH_ID")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """A batch's progress, as its submitter last recorded it, and whether that process is still there."""
    with session(ctx, store, durable=True, load_imports=False) as runtime:
        record = load_status(runtime.store, batch_id)
    if as_json:
        typer.echo(json.dumps(_batch_json(record), indent=2))
        return
    out = output_console()
    for line in _describe(record):
        out.print(line, soft_wrap=True, highlight=False)


def list_batches(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, max=MAX_COUNT, help="At most N batches, newest first.")] = 20,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Batches in the run store, newest first."""
    with session(ctx, store, durable=True, load_imports=False) as runtime:
        records = runtime.store.list_batches(limit)
    if as_json:
        typer.echo(json.dumps([_batch_json(r) for r in records], indent=2))
        return
    if not records:
        error_console().print("no batches in this run store")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("ID", "STATUS", "DONE", "COMPLETED", "FAILED", "INVALID", "AGENT", "UPDATED"):
        table.add_column(name, no_wrap=True)
    now = time.time()
    for r in records:
        table.add_row(
            r.id,
            _state(r),
            f"{r.done}/{r.total}",
            str(r.completed),
            str(r.failed),
            str(r.invalid),
            escape(r.agent),
            ago(r.updated_at, now),
        )
    output_console().print(table)


def _state(record: BatchRecord) -> str:
    if record.status == "finished":
        return "[green]finished[/]" if record.completed == record.total else "[red]finished with failures[/]"
    if record.holder is None or holder_is_dead(record.holder):
        return "[yellow]stopped[/]"
    return "[cyan]running[/]"


def _describe(record: BatchRecord) -> list[str]:
    not_started = record.total - record.done - record.running
    lines = [
        f"[bold]batch {escape(record.id)}[/]  {_state(record)}",
        f"agent      {escape(record.agent)}",
        f"inputs     {escape(record.input_path or '-')} (sha256 {record.input_hash[:12]})",
        f"items      {record.done}/{record.total} done: [green]{record.completed} completed[/], "
        f"[red]{record.failed} failed[/], "
        f"[yellow]{record.invalid} invalid[/]; {record.running} in flight, {max(0, not_started)} not started",
        f"created    {local_time(record.created_at)} ({ago(record.created_at)})",
        f"updated    {local_time(record.updated_at)} ({ago(record.updated_at)})",
    ]
    if record.status == "finished":
        lines.append(f"finished   {local_time(record.finished_at)}")
    elif record.holder and not holder_is_dead(record.holder):
        lines.append(f"submitter  {escape(record.holder)}")
    else:
        gone = f"{escape(record.holder)} is gone" if record.holder else "was stopped"
        lines.append(
            f"submitter  [yellow]{gone}[/]: counts are as of its last update; submit the same command again to resume"
        )
    return lines


def _batch_json(record: BatchRecord) -> dict[str, Any]:
    data = {name: getattr(record, name) for name in record.__dataclass_fields__}
    for name in ("created_at", "updated_at", "finished_at"):
        data[name] = iso(data[name])
    data["done"] = record.done
    data["submitter_alive"] = bool(record.holder) and not holder_is_dead(record.holder)
    return data


__all__ = ["register"]
