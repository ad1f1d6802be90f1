"""Where ``lg ask`` runs its agent: in this process, or on the Celery workers (``--workers``).

In this process is the default, broker or not: ``lg ask`` is the quickest way to try
an agent, and nothing else has to be running. ``--workers`` hands the run to the
workers of the configured broker, as a web app's ``start_execution`` does, and
follows its events as they arrive; the run is then in the workers' store, where
``lg runs`` finds it. Either way one line on stderr says which it is, before the
answer, so nobody wonders whether the workers they started are being used.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from lg_core.cli_errors import UsageError
from lg_core.cli_output import EventPrinter, stream_run
from lg_core.urls import safe_url


def ask_here(
    runtime: Any,
    agent_class: Any,
    message: str,
    options: dict[str, Any],
    out: Console,
    info: Console,
    *,
    stream: bool,
    answer_only: bool,
) -> Any:
    """Run the agent in this process and print its answer; returns the finished Run.

    The line saying so comes with the run's first event: a request refused before the run
    starts (a bad input, a run id in use) is one error line, as every usage error is.
    """
    broker = runtime.configuration.broker_url
    reason = f"--workers runs it on the workers at {safe_url(broker)}" if broker else "no broker configured"
    run = agent_class.build_run(message, on_event=_Once(info, f"running in this process ({reason})"), **options)
    if stream:
        return stream_run(run, out, info, answer_only=answer_only)
    run.call()
    if run.response:
        out.print(run.response, markup=False, soft_wrap=True)
    return run


def ask_on_workers(
    runtime: Any,
    agent_class: Any,
    message: str,
    options: dict[str, Any],
    out: Console,
    info: Console,
    *,
    stream: bool,
    answer_only: bool,
) -> Any:
    """Start the run on the workers, print its events as they arrive and its answer; returns the
    finished Run. Ctrl-C cancels the run: nobody would be left to read its answer."""
    broker = _workers_broker(runtime)
    runtime.distributed_backend("lg ask --workers").check_reachable()  # one line when it does not answer
    execution = agent_class.start_execution(message, **options)
    _say(info, f"running on the workers at {safe_url(broker)} (run {execution.run_id})")
    printer = EventPrinter(out, info, answer_only=answer_only) if stream else None
    run = None
    try:
        if printer is not None:
            for event in execution.events():
                printer(event)
        run = execution.wait()
    except KeyboardInterrupt:
        execution.cancel()
        raise
    finally:
        if printer is not None:
            printer.finish(run)
    if printer is None and run.response:
        out.print(run.response, markup=False, soft_wrap=True)
    return run


def _workers_broker(runtime: Any) -> str:
    """The broker the workers take runs from; a UsageError when there is none, or when the run
    store is this process's own (in memory), where no worker could find the run."""
    configuration = runtime.configuration
    broker: str | None = configuration.broker_url
    if not broker:
        raise UsageError(
            "--workers needs the workers' broker: set LG_BROKER_URL (or broker_url in lg.yaml), "
            "e.g. redis://127.0.0.1:6379/0; `. .lg/stack/env` sets it for the local stack"
        )
    if runtime.store.in_memory:
        raise UsageError(
            "--workers needs the run store the workers use: pass --store or set LG_RUN_STORE "
            "(an in-memory store lives in this process only)"
        )
    return broker


class _Once:
    """An ``on_event`` consumer that prints its line at the first event and ignores the rest."""

    def __init__(self, info: Console, line: str) -> None:
        self.info, self.line, self.said = info, line, False

    def __call__(self, _event: Any) -> None:
        if not self.said:
            self.said = True
            _say(self.info, self.line)


def _say(info: Console, line: str) -> None:
    info.print(f"[dim]{escape(line)}[/]", soft_wrap=True, highlight=False)


__all__ = ["ask_here", "ask_on_workers"]
