"""How ``lg`` shows runs: live events as they happen, stored runs, steps and events as tables.

:class:`EventPrinter` renders a run's live events (text deltas as they
arrive, tool calls as they start and finish); ``lg ask``, ``lg runs resume``
and ``lg demo`` share it. The table and JSON helpers render run-store records
for ``lg runs``. Times are shown in local time and as ``5m ago``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lg_core.events import StreamEvent
from lg_core.store.records import EventRecord, RunRecord, StepRecord

STATUS_STYLES = {
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "partial": "yellow",
    "cancelled": "magenta",
}


PREVIEW = 60


def output_console(piped_width: int = 200) -> Console:
    """stdout; ``piped_width`` wide when piped, so tables and ids are not wrapped for scripts."""
    return _wide(Console(highlight=False), piped_width)


def error_console() -> Console:
    return _wide(Console(stderr=True, highlight=False), 200)


def writes_to_terminal(console: Console) -> bool:
    """Whether ``console`` writes to a terminal (not a file or a pipe), whatever FORCE_COLOR says."""
    try:
        return console.file.isatty()
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed file
        return False


def _wide(console: Console, width: int) -> Console:
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = width
    return console


class EventPrinter:
    """Renders live events: text deltas as they arrive, tool calls as they start and finish.

    Text goes to ``out``; tool calls and notes go to ``info`` (pass the same
    console twice to keep everything on one stream). Safe to call from the
    engine's step threads.

    ``answer_only`` (``out`` is a file or a pipe): ``out`` gets only the run's
    answer, printed by :meth:`finish`; the text a model writes before its tool
    calls ("Let me check.") goes to ``info`` ahead of them, as narration.
    """

    def __init__(self, out: Console, info: Console | None = None, *, answer_only: bool = False) -> None:
        self.out = out
        self.info = info or out
        self.answer_only = answer_only
        # Text arrives in many small deltas: kept in pieces and joined when read, since
        # appending to one string attribute copies it every time (quadratic in the answer).
        self._pieces: list[str] = []
        self._pending: list[str] = []  # answer_only: text not yet known to be narration or the answer
        self._mid_line = False
        self._lock = threading.Lock()

    @property
    def text(self) -> str:
        """Everything the model has written so far."""
        return "".join(self._pieces)

    def __call__(self, event: StreamEvent) -> None:
        handler = getattr(self, f"_on_{event.type}", None)
        if handler is not None:
            with self._lock:
                handler(event.data)

    def finish(self, run: Any = None) -> None:
        """End the output; with ``answer_only``, print ``run``'s answer to ``out``."""
        with self._lock:
            self._end_line()
            if not self.answer_only:
                return
            response = getattr(run, "response", None)
            if response:
                self.out.print(response, markup=False, soft_wrap=True)
            else:  # no answer (the run failed): what it wrote is still worth seeing
                self._narrate()

    def _on_text_delta(self, data: Mapping[str, Any]) -> None:
        text = str(data.get("text", ""))
        self._pieces.append(text)
        if self.answer_only:
            self._pending.append(text)
            return
        self.out.print(text, end="", markup=False, soft_wrap=True)
        self._mid_line = not text.endswith("\n")

    def _on_tool_execution_start(self, data: Mapping[str, Any]) -> None:
        self.note(f"[cyan]-> {escape(str(data.get('name')))}[/]({escape(format_arguments(data.get('input')))})")

    def _on_tool_execution_stop(self, data: Mapping[str, Any]) -> None:
        mark = "[green]ok[/]" if data.get("status") == "success" else f"[red]error ({data.get('error_kind')})[/]"
        self.note(f"   {mark} {escape(preview(data.get('output'), 90))}")

    def _on_tool_outcome_unknown(self, data: Mapping[str, Any]) -> None:
        self.note(
            f"[yellow]?? {escape(str(data.get('name')))}: outcome unknown after a crash; "
            "not run again (at_most_once)[/]"
        )

    def _on_model_retry(self, data: Mapping[str, Any]) -> None:
        if self.answer_only:  # the retried call's text was never shown: drop it
            self._pending.clear()
        extra = "; the text above is superseded" if data.get("partial_text") and not self.answer_only else ""
        self.note(f"[yellow]model call retried{extra}[/]")

    def _on_run_resumed(self, data: Mapping[str, Any]) -> None:
        steps = ", ".join(data.get("open_steps") or []) or "none"
        self.note(f"[magenta]resumed[/] by {escape(str(data.get('holder')))}; open steps: {escape(steps)}")

    def _on_interjection(self, data: Mapping[str, Any]) -> None:
        self.note(f"[blue]interjection:[/] {escape(preview(data.get('message') or data.get('text'), 90))}")

    def note(self, markup: str) -> None:
        self._end_line()
        self._narrate()
        self.info.print(markup, soft_wrap=True, highlight=False)

    def _narrate(self) -> None:
        """answer_only: the text so far was not the answer (a tool call follows): show it on ``info``."""
        text = "".join(self._pending).strip()
        self._pending.clear()
        if text:
            self.info.print(text, markup=False, soft_wrap=True, highlight=False)

    def _end_line(self) -> None:
        if self._mid_line:
            self.out.print()
            self._mid_line = False


def format_arguments(value: Any) -> str:
    if not isinstance(value, Mapping):
        return "" if value is None else preview(json.dumps(value, default=str), 80)
    return preview(
        ", ".join(f"{k}={json.dumps(v, default=str, ensure_ascii=False)}" for k, v in value.items()),
        80,
    )


def preview(value: Any, width: int = PREVIEW) -> str:
    text = " ".join(str(value or "").split())
    return text if len(text) <= width else text[: width - 3] + "..."


def status_text(status: str | None) -> str:
    status = status or "-"
    return f"[{STATUS_STYLES.get(status, 'white')}]{status}[/]"


def ago(timestamp: float | None, now: float | None = None) -> str:
    """``12s ago``, ``5m ago``, ``3h ago``, ``2d ago``, then the local date."""
    if timestamp is None:
        return "-"
    delta = max(0.0, (now if now is not None else time.time()) - timestamp)
    for size, unit in ((60, "s"), (3600, "m"), (86400, "h"), (7 * 86400, "d")):
        if delta < size:
            divisor = {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
            return f"{int(delta // divisor)}{unit} ago"
    return local_time(timestamp, with_seconds=False)


def local_time(timestamp: float | None, with_seconds: bool = True) -> str:
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S" if with_seconds else "%Y-%m-%d %H:%M")


def iso(timestamp: float | None) -> str | None:
    return None if timestamp is None else datetime.fromtimestamp(timestamp).astimezone().isoformat()


def report_outcome(run: Any, info: Console) -> int:
    """The status line for a finished run; the exit code (0 only when completed)."""
    usage = run.usage
    if run.outcome == "completed":
        info.print(
            f"[green]completed[/] run {run.id} | {usage.input_tokens} input / {usage.output_tokens} output tokens",
            soft_wrap=True,
        )
        return 0
    error = run.error
    reason = f": {type(error).__name__}: {error}" if error is not None else ""
    info.print(f"{status_text(run.outcome or 'unfinished')} run {run.id}{escape(reason)}", soft_wrap=True)
    return 1


def stream_run(run: Any, out: Console, info: Console, *, answer_only: bool = False) -> Any:
    """Iterate a dormant Run, rendering its events; returns the finished Run.

    ``answer_only``: ``out`` gets only the answer, once the run finished (see EventPrinter).
    """
    printer = EventPrinter(out, info, answer_only=answer_only)
    finished = None
    try:
        for event in run:
            printer(event)
        finished = run
    finally:
        printer.finish(finished)
    return run


def resume_streaming(runtime: Any, run_id: str, printer: EventPrinter, *, force: bool = False) -> Any:
    """``lg_core.resume`` with the resumed run's live events rendered by ``printer``."""
    unsubscribe = runtime.engine.bus.subscribe(run_id, printer)
    run = None
    try:
        run = runtime.resume(run_id, force=force)
    finally:
        unsubscribe()
        printer.finish(run)
    return run


def runs_table(records: list[RunRecord]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("ID", "ENTRYPOINT", "STATUS", "CREATED", "UPDATED", "RESPONSE"):
        table.add_column(name, no_wrap=name != "RESPONSE", overflow="fold")
    now = time.time()
    for r in records:
        shown = r.response if r.response is not None else (r.error or {}).get("message", "")
        table.add_row(
            r.id,
            r.entrypoint,
            status_text(r.status),
            ago(r.created_at, now),
            ago(r.updated_at, now),
            escape(preview(shown)),
        )
    return table


def record_json(record: RunRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "entrypoint": record.entrypoint,
        "kind": record.kind,
        "status": record.status,
        "session_id": record.session_id,
        "actor_id": record.actor_id,
        "holder": record.holder,
        "cancel_requested": record.cancel_requested,
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
        "finished_at": iso(record.finished_at),
        "response": record.response,
        "error": record.error,
        "usage": record.usage,
    }


def describe_run(record: RunRecord, message_count: int) -> list[str]:
    from lg_core.lease_holders import holder_is_dead
    from lg_core.usage import Usage

    lines = [
        f"[bold]run[/]        {record.id}",
        f"entrypoint  {escape(record.entrypoint)}",
        f"status      {status_text(record.status)}"
        + ("  [yellow](cancel requested)[/]" if record.cancel_requested else ""),
        f"outcome     {record.outcome or '-'}",
        f"created     {local_time(record.created_at)} ({ago(record.created_at)})",
        f"updated     {local_time(record.updated_at)} ({ago(record.updated_at)})",
        f"session     {escape(record.session_id)}" + (f"  actor {escape(record.actor_id)}" if record.actor_id else ""),
        f"message     {escape(preview(invocation_text(record.invocation), 100))}",
        f"messages    {message_count}",
    ]
    if not record.finished and record.holder:
        dead = holder_is_dead(record.holder)
        state = (
            "[red]process gone[/]: resume it with `lg runs resume " + record.id + "`"
            if dead
            else "alive or on another host"
        )
        lines.append(f"holder      {escape(record.holder)} ({state})")
    if record.response is not None:
        lines.append(f"response    {escape(preview(record.response, 200))}")
    if record.error:
        lines.append(
            f"error       [red]{escape(str(record.error.get('name')))}: {escape(str(record.error.get('message')))}[/]"
        )
    if record.usage:
        usage = Usage.from_dict(record.usage)
        lines.append(f"usage       {usage.input_tokens} input / {usage.output_tokens} output tokens")
    return lines


def invocation_text(invocation: Mapping[str, Any]) -> str:
    from lg_core.messages import Message

    try:
        return Message.from_dict(invocation["message"]).text
    except Exception:  # noqa: BLE001 - a display fallback for odd stored rows
        return json.dumps(invocation.get("message"), default=str)


def steps_table(steps: list[StepRecord], *, attempts: bool = True) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("STEP", "KIND", "STATUS", *(("ATTEMPTS",) if attempts else ()), "DETAIL"):
        table.add_column(name, no_wrap=name != "DETAIL", overflow="fold")
    for step in steps:
        style = {"succeeded": "green", "failed": "red", "unknown": "yellow", "cancelled": "magenta"}.get(
            step.status, "cyan"
        )
        counts = (attempts_text(step),) if attempts else ()
        table.add_row(step.key, step.kind, f"[{style}]{step.status}[/]", *counts, escape(step_detail(step)))
    return table


def attempts_text(step: StepRecord) -> str:
    """ATTEMPTS: how many times workers claimed the step; ``-`` for a step none claimed (one
    this process ran itself, in local mode, or one still waiting for a worker)."""
    return str(step.attempts) if step.attempts else "-"


def step_detail(step: StepRecord) -> str:
    if step.error:
        return f"{step.error.get('name', 'error')}: {step.error.get('message', '')}"
    if step.kind == "tool" and step.input:
        return f"{step.input.get('name')}({format_arguments(step.input.get('input'))})"
    return ""


def step_json(step: StepRecord) -> dict[str, Any]:
    return {
        "key": step.key,
        "kind": step.kind,
        "status": step.status,
        "attempts": step.attempts,
        "input": step.input,
        "error": step.error,
        "created_at": iso(step.created_at),
        "finished_at": iso(step.finished_at),
        "body_entered_at": iso(step.body_entered_at),  # an at_most_once call's tool started
    }


def trajectory_table(steps: list[Mapping[str, Any]]) -> Table:
    """A composite assembly run's trajectory, as its stored result keeps it: one row per participant
    execution (a Graph node, a Swarm member, a Workflow call), with what came before it."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("STEP", "PARTICIPANT", "KIND", "STATUS", "ATTEMPTS", "SECONDS", "AFTER", "OUTPUT"):
        table.add_column(name, no_wrap=name not in ("AFTER", "OUTPUT"), overflow="fold")
    for step in steps:
        attempts = step.get("attempts") or []
        status = str(step.get("status", "?"))
        style = {"completed": "green", "failed": "red", "cancelled": "magenta"}.get(status, "yellow")
        table.add_row(
            escape(str(step.get("id", "?"))),
            escape(str(step.get("participant", "?"))),
            escape(str(step.get("assembly_kind", "?"))),
            f"[{style}]{escape(status)}[/]",
            str(len(attempts)),
            _seconds(attempts),
            escape(", ".join(str(item) for item in step.get("predecessor_ids") or ())),
            escape(preview(step.get("output"), 60)) if step.get("output") is not None else "",
        )
    return table


def _seconds(attempts: list[Mapping[str, Any]]) -> str:
    """From the first attempt's start to the last one's finish (``-`` when unreadable)."""
    try:
        started = datetime.fromisoformat(attempts[0]["started_at"])
        finished = datetime.fromisoformat(attempts[-1]["finished_at"])
    except (IndexError, KeyError, TypeError, ValueError):
        return "-"
    return f"{(finished - started).total_seconds():.2f}"


def events_table(events: list[EventRecord]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("SEQ", "TIME", "TYPE", "DETAIL"):
        table.add_column(name, no_wrap=name != "DETAIL", overflow="fold")
    for event in events:
        when = datetime.fromtimestamp(event.created_at).strftime("%H:%M:%S.%f")[:-3]
        detail = escape(event_detail(event.type, event.data))
        table.add_row(str(event.seq), when, event.type, detail)
    return table


def event_detail(kind: str, data: Mapping[str, Any]) -> str:
    if kind == "invocation_start":
        message = data.get("input")
        return preview(invocation_text({"message": message}) if isinstance(message, Mapping) else message, 100)
    if kind in ("tool_execution_start", "tool_call_stop"):
        return f"{data.get('name')}({format_arguments(data.get('input'))})"
    if kind == "usage" and isinstance(data.get("usage"), Mapping):
        usage = data["usage"]
        return f"{usage.get('input_tokens', 0)} input / {usage.get('output_tokens', 0)} output tokens"
    if kind == "invocation_stop":
        return ""
    if kind == "tool_execution_stop":
        return f"{data.get('name')} {data.get('status')}: {preview(data.get('output'), 80)}"
    if kind in ("run_stop", "run_partial") and data.get("response") is not None:
        return preview(data.get("response"), 100)
    if kind in ("run_error", "run_cancel", "run_partial"):
        return preview(data.get("message") or (data.get("error") or {}).get("message"), 100)
    if kind == "message_stop":
        return f"stop_reason={data.get('stop_reason')}"
    if kind == "run_resumed":
        return f"by {data.get('holder')}; open steps: {', '.join(data.get('open_steps') or [])}"
    return preview(json.dumps(dict(data), default=str), 100)
