"""``lg worker``: the Celery workers of a LittleGhost fleet, one command per host role.

    lg worker --queues lg.orchestrate,lg.model,lg.tools --import myapp.agents
    lg worker --queues lg.sandbox                       (on a Bubblewrap host)

Registered through the ``littleghost.cli`` entry point so lg_core never
imports Celery. The command checks its settings in this process first (a bad
store URL, a missing or unreachable broker or an unimportable module is one red line and
exit code 2, not a Celery traceback per worker), then starts one Celery worker
per pool kind (:func:`lg_workers.worker.plan`) with the resolved settings in
their environment, from a small supervisor process it replaces itself with
(:func:`lg_workers.worker.supervise`), which forwards SIGTERM/SIGINT/SIGQUIT to them.
"""

from __future__ import annotations

import os
import shutil
from enum import StrEnum
from typing import Annotated, Any

import typer

from lg_core.cli_errors import UsageError
from lg_core.cli_output import error_console
from lg_core.cli_session import ImportOption, StoreOption, session
from lg_workers.broker_check import check_broker
from lg_workers.queues import MODEL, ORCHESTRATE, QUEUES, SANDBOX, TOOLS
from lg_workers.sandbox_check import check_sandbox
from lg_workers.worker import WorkerGroup, plan, supervise

DEFAULT_QUEUES = ",".join((ORCHESTRATE, MODEL, TOOLS))


class Pool(StrEnum):
    """Celery pools that need nothing beyond Celery itself."""

    prefork = "prefork"
    threads = "threads"
    solo = "solo"


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"


BrokerOption = Annotated[
    str | None,
    typer.Option("--broker", metavar="URL", help="Broker URL, e.g. redis://127.0.0.1:6379/0 (default: LG_BROKER_URL)."),
]


def worker(
    ctx: typer.Context,
    queues: Annotated[
        str,
        typer.Option("--queues", "-Q", metavar="QUEUES", help=f"Comma-separated queues: {', '.join(QUEUES)}."),
    ] = DEFAULT_QUEUES,
    pool: Annotated[
        Pool | None, typer.Option("--pool", help="One pool for every queue (default: the right one per queue).")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", min=1, max=1000, help="Processes or threads per worker."),
    ] = None,
    imports: ImportOption = None,
    loglevel: Annotated[LogLevel, typer.Option("--loglevel", "-l", case_sensitive=False)] = LogLevel.INFO,
    store: StoreOption = None,
    broker: BrokerOption = None,
) -> None:
    """Run Celery workers for QUEUES (one per pool kind) until stopped."""
    groups = plan(parse_queues(queues), pool=pool.value if pool else None, concurrency=concurrency)
    with session(ctx, store, imports, durable=False, load_imports=True, broker_url=broker) as runtime:
        env = worker_env(runtime.configuration, _all_imports(ctx, runtime.configuration.imports, imports))
        # Unreachable now is a wrong URL or a broker not started: say so once, rather than Celery
        # retrying for minutes and being restarted forever (a later outage is still ridden out).
        check_broker(runtime.configuration.broker_url)
        # A sandbox backend this host cannot run would fail every step the worker takes: refuse now.
        check_sandbox(runtime.configuration.sandbox, [queue for group in groups for queue in group.queues])
    describe(groups, env)
    preload_celery()
    supervise(groups, env, loglevel.value)


def preload_celery() -> None:
    """Import Celery's worker and the task modules here, once, before the workers are forked from
    this process (:func:`lg_workers.worker.fork_worker`), so each starts with them loaded. The app
    itself (lg_workers.celery) is built in each worker, from the environment the worker gets."""
    import celery.apps.worker  # noqa: F401
    import celery.worker.consumer  # noqa: F401

    import lg_workers.tasks  # noqa: F401


def parse_queues(text: str) -> list[str]:
    """``"lg.model, lg.tools"`` -> ``["lg.model", "lg.tools"]`` (order kept, duplicates dropped)."""
    queues = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not queues:
        raise UsageError(f"--queues is empty; name one or more of {', '.join(QUEUES)}")
    return queues


def worker_env(configuration: Any, imports: list[str]) -> dict[str, str]:
    """This process's environment plus the resolved settings every worker must share."""
    from sqlalchemy.engine import make_url

    if not configuration.broker_url:
        raise UsageError(
            "lg worker needs a broker: pass --broker redis://HOST:6379/0, or set LG_BROKER_URL "
            "(or broker_url in lg.yaml)"
        )
    url = make_url(configuration.run_store)
    if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
        raise UsageError(
            "lg worker needs a run store shared with the processes that start runs: pass --store "
            "postgresql+psycopg://USER@HOST/DB, or set LG_RUN_STORE (or run_store in lg.yaml); "
            "an in-memory store is private to one process"
        )
    env = dict(os.environ)
    env.update(LG_RUN_STORE=configuration.run_store, LG_BROKER_URL=configuration.broker_url)
    if imports:
        env["LG_IMPORTS"] = ",".join(imports)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)
    return env


def describe(groups: list[WorkerGroup], env: dict[str, str]) -> None:
    info = error_console()
    for group in groups:
        info.print(f"worker: {', '.join(group.queues)} on a {group.pool} pool of {group.concurrency}", highlight=False)
    if env.get("LG_IMPORTS"):
        info.print(f"imports: {env['LG_IMPORTS']}", highlight=False)
    if any(SANDBOX in group.queues for group in groups) and shutil.which("bwrap") is None:
        info.print(
            "[yellow]warning:[/] bwrap (Bubblewrap) is not installed here; sandboxed tools and code mode on "
            f"{SANDBOX} will fail (install bubblewrap)",
            highlight=False,
        )


def _all_imports(ctx: typer.Context, configured: list[str], command: list[str] | None) -> list[str]:
    root = ctx.find_root().params.get("imports") or []
    return list(dict.fromkeys([*configured, *root, *(command or [])]))


def register(app: typer.Typer, runs_app: typer.Typer) -> None:
    """The ``littleghost.cli`` entry point: adds ``lg worker``."""
    app.command("worker")(worker)


__all__ = ["DEFAULT_QUEUES", "parse_queues", "register", "worker", "worker_env"]
