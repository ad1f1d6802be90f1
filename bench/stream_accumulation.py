#!/usr/bin/env python
"""What a streamed answer costs per megabyte: it must stay flat from 1 MB to 16 MB.

    .venv/bin/python bench/stream_accumulation.py            # full run (~1 minute)
    .venv/bin/python bench/stream_accumulation.py --quick    # smoke run (a few seconds)
    .venv/bin/python bench/stream_accumulation.py --json     # machine-readable output

A model streams its answer in small deltas (a token is about 4 characters).
The model turn keeps the text streamed so far (a run stopped at its deadline
returns it), and each provider's stream reader assembles the text and a tool
call's JSON arguments from their pieces. Assembled by string concatenation,
every delta copies all the text before it, so the cost grows with the square
of the answer's length, holding the GIL: every thread of the worker stalls
meanwhile. Assembled in linear time, CPU seconds per MB do not depend on the
answer's length.

1. Floor: the scripted provider's stream of the same answer, consumed by a
   plain loop that keeps its text (pieces, joined at the end). CPU s per MB.
2. Engine: ``Agent.ask`` on a SQLite file store, the scripted model answering
   1, 4 and 16 MB in 4-character deltas: the real model-turn path. CPU s per
   MB, and per MB over the floor's.
3. Stream readers: each HTTP adapter's reader fed 1, 4 and 16 MB of text, of
   tool-call arguments and of OpenRouter's reasoning details, in 256-character
   pieces as already-decoded chunks (no HTTP or JSON decoding is measured).
   A quadratic assembly still copies the whole text at every piece, so it
   shows at this piece size too (ratios of 10 and more).
4. Targets: for every path, CPU s per MB at 16 MB / at 1 MB <= 1.5.

CPU time is the process's (``time.process_time``: every thread, not the wall
clock), after ``gc.collect()``. Rounds are interleaved (every size and path in
turn, so a busy spell of the machine falls on all of them) and the least CPU
time of a size's rounds counts, since other load only ever adds to it: the
floor and the engine run 3, 2 and 1 rounds of 1, 4 and 16 MB, the readers 5
of each. The exit status is 0 whatever the figures are (``--strict`` makes a
missed target exit 1), so a smoke test can run ``--quick`` on any machine.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import lg_core
from lg_core import Agent, Configuration, Message, with_configuration
from lg_core.events import StreamEvent
from lg_core.models.request import ModelRequest
from lg_core.providers import scripted
from lg_core.providers.anthropic._stream import EventReader
from lg_core.providers.gemini._stream import ChunkReader as GeminiChunkReader
from lg_core.providers.openai._stream import ChunkReader as OpenAIChunkReader
from lg_core.providers.openrouter._stream import OpenRouterChunkReader
from lg_core.providers.scripted import ScriptedProvider

MB = 1 << 20
DELTA = "abc "  # one 4-character delta: the scripted provider streams word by word
PIECE = 256  # characters per chunk fed to the stream readers
TARGET_RATIO = 1.5
MODEL = "lg-bench-stream"


@dataclass(frozen=True)
class Plan:
    """The answer sizes measured, in MB, and how many rounds each runs."""

    sizes: tuple[float, ...]
    engine_rounds: tuple[int, ...]  # per size, for the floor and the engine: fewer for the long answers
    reader_rounds: int  # for every size, for the readers (they cost a fortieth of the engine per MB)


FULL = Plan(sizes=(1, 4, 16), engine_rounds=(3, 2, 1), reader_rounds=5)
QUICK = Plan(sizes=(1 / 16, 1 / 4, 1), engine_rounds=(1, 1, 1), reader_rounds=1)


class StreamAgent(Agent):
    model = f"scripted:{MODEL}"


def answer(megabytes: float) -> str:
    """An ASCII answer of ``megabytes`` MB that the scripted provider streams in 4-character deltas."""
    return DELTA * int(megabytes * MB / len(DELTA))


def cpu_seconds(action: Callable[[], Any]) -> float:
    gc.collect()
    start = time.process_time()
    action()
    return time.process_time() - start


# -- 1 and 2: the floor and the engine -----------------------------------------------------


def floor(text: str) -> None:
    """The scripted stream of ``text`` through a plain loop keeping its pieces: no engine."""
    provider = ScriptedProvider("scripted")
    request = ModelRequest(messages=(Message(role="user", content="go"),), metadata={"sequence": 0})
    pieces = []
    for event in provider.stream(request, MODEL):
        if event.type == "text_delta":
            pieces.append(event.data["text"])
    if len("".join(pieces)) != len(text):
        raise AssertionError("the floor's stream did not carry the whole answer")


def engine(configuration: Configuration, text: str) -> None:
    with with_configuration(configuration):
        run = StreamAgent.ask("go")
    if not run.completed or len(run.response or "") != len(text):
        raise RuntimeError(f"benchmark run {run.id} ended {run.outcome}: {run.error!r}")


# -- 3: the stream readers -----------------------------------------------------------------


def pieces_of(text: str) -> Iterator[str]:
    return (text[start : start + PIECE] for start in range(0, len(text), PIECE))


def arguments(megabytes: float) -> str:
    """A tool call's JSON arguments of ``megabytes`` MB."""
    return json.dumps({"text": "x" * int(megabytes * MB)})


def drain(events: Iterator[StreamEvent]) -> Any:
    """The response of the ``message_stop`` event at the end of ``events``."""
    response = None
    for event in events:
        if event.type == "message_stop":
            response = event.data["response"]
    return response


def openai_text(text: str) -> Any:
    reader = OpenAIChunkReader("bench:model", 0)
    for piece in pieces_of(text):
        drain(reader.feed({"choices": [{"index": 0, "delta": {"content": piece}}]}))
    drain(reader.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    return drain(reader.finish())


def openai_arguments(text: str) -> Any:
    reader = OpenAIChunkReader("bench:model", 0)
    start = {"index": 0, "id": "call_1", "function": {"name": "write", "arguments": ""}}
    drain(reader.feed({"choices": [{"index": 0, "delta": {"tool_calls": [start]}}]}))
    for piece in pieces_of(text):
        fragment = {"index": 0, "function": {"arguments": piece}}
        drain(reader.feed({"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]}))
    drain(reader.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}))
    return drain(reader.finish())


def openrouter_reasoning(text: str) -> Any:
    """Reasoning as OpenRouter streams it: each piece both as ``reasoning`` and as a ``reasoning_details``
    fragment, which the reader merges into one detail; then a short answer."""
    reader = OpenRouterChunkReader("bench:model", 0)
    for piece in pieces_of(text):
        detail = {"type": "reasoning.text", "text": piece, "index": 0}
        drain(reader.feed({"choices": [{"index": 0, "delta": {"reasoning": piece, "reasoning_details": [detail]}}]}))
    drain(reader.feed({"choices": [{"index": 0, "delta": {"content": "Done."}, "finish_reason": "stop"}]}))
    return drain(reader.finish())


def anthropic(block: dict[str, Any], delta: str, field: str, text: str) -> Any:
    reader = EventReader("bench:model", 0, "bench")
    drain(reader.feed({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 1}}}))
    drain(reader.feed({"type": "content_block_start", "index": 0, "content_block": block}))
    for piece in pieces_of(text):
        drain(reader.feed({"type": "content_block_delta", "index": 0, "delta": {"type": delta, field: piece}}))
    drain(reader.feed({"type": "content_block_stop", "index": 0}))
    drain(reader.feed({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}))
    return drain(reader.finish())


def anthropic_text(text: str) -> Any:
    return anthropic({"type": "text", "text": ""}, "text_delta", "text", text)


def anthropic_arguments(text: str) -> Any:
    return anthropic(
        {"type": "tool_use", "id": "toolu_1", "name": "write", "input": {}}, "input_json_delta", "partial_json", text
    )


def gemini_text(text: str) -> Any:
    reader = GeminiChunkReader("bench:model", 0, "bench")
    for piece in pieces_of(text):
        drain(reader.feed({"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}}]}))
    drain(reader.feed({"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP"}]}))
    return drain(reader.finish())


READERS: dict[str, tuple[Callable[[str], Any], Callable[[float], str]]] = {
    "OpenAI chunks, text": (openai_text, answer),
    "OpenAI chunks, tool-call arguments": (openai_arguments, arguments),
    "OpenRouter chunks, reasoning details": (openrouter_reasoning, answer),
    "Anthropic events, text": (anthropic_text, answer),
    "Anthropic events, tool-call arguments": (anthropic_arguments, arguments),
    "Gemini chunks, text": (gemini_text, answer),
}


def assembled(response: Any, text: str) -> bool:
    """Whether the reader's response holds ``text`` whole: as its text, its tool call's arguments, or
    its reasoning and that reasoning's one detail."""
    uses = response.message.tool_uses
    if uses:
        return json.dumps(uses[0].input) == text
    reasoning = [block for block in response.message.content if block.kind == "reasoning"]
    if reasoning:
        return reasoning[0].text == text and [detail["text"] for detail in reasoning[0].details] == [text]
    return response.message.text == text


# -- measuring -----------------------------------------------------------------------------


def interleaved(
    measures: dict[str, Callable[[str], Any]], texts: list[str], rounds: Sequence[int]
) -> dict[str, list[float]]:
    """CPU seconds per MB of each measure on each text (``rounds[i]`` rounds for ``texts[i]``): the least
    of its rounds. A round takes every size and every measure in turn, so that a busy spell of the
    machine falls on all of them alike rather than on one size."""
    best = {name: [math.inf] * len(texts) for name in measures}
    for round_index in range(max(rounds)):
        for index, text in enumerate(texts):
            if round_index >= rounds[index]:
                continue
            for name, measure in measures.items():
                seconds = cpu_seconds(functools.partial(measure, text))
                best[name][index] = min(best[name][index], seconds / (len(text) / MB))
    return best


def measure_engine(plan: Plan, workdir: Path) -> dict[str, list[float]]:
    """The floor's and the engine's CPU seconds per MB for each size; the scripted model answers
    whatever ``streamed["text"]`` holds when it is called."""
    configuration = Configuration(run_store=f"sqlite:///{workdir / 'runs.db'}")
    streamed = {"text": answer(plan.sizes[0])}

    def answering(action: Callable[[str], Any]) -> Callable[[str], Any]:
        def measure(text: str) -> Any:
            streamed["text"] = text
            return action(text)

        return measure

    scripted.register(MODEL, lambda request: {"text": streamed["text"]})
    try:
        engine(configuration, streamed["text"])  # warm-up: imports, schema, statement caches
        floor(streamed["text"])
        measures = {"floor": answering(floor), "engine": answering(functools.partial(engine, configuration))}
        return interleaved(measures, [answer(size) for size in plan.sizes], plan.engine_rounds)
    finally:
        scripted.unregister(MODEL)
        configuration.close()


def measure_readers(plan: Plan) -> dict[str, list[float]]:
    results = {}
    for name, (read, make) in READERS.items():
        texts = [make(size) for size in plan.sizes]
        if not assembled(read(texts[0]), texts[0]):  # each reader assembles what it was fed
            raise AssertionError(f"{name}: the reader did not assemble the whole stream")
        results[name] = interleaved({name: read}, texts, [plan.reader_rounds] * len(texts))[name]
    return results


def run_benchmark(plan: Plan, workdir: Path) -> dict[str, Any]:
    paths = measure_engine(plan, workdir)
    readers = measure_readers(plan)
    rows = [
        {"name": "Floor: scripted stream, plain loop", **figures_of(paths["floor"], plan)},
        {"name": "Engine: Agent.ask, SQLite file store", **figures_of(paths["engine"], plan)},
        *({"name": f"Reader: {name}", **figures_of(figures, plan)} for name, figures in readers.items()),
    ]
    engine_over_floor = [e / f for e, f in zip(paths["engine"], paths["floor"], strict=True)]
    return {
        "environment": {
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "littleghost": lg_core.__version__,
            "platform": platform.platform(),
            "plan": {
                "sizes_mb": list(plan.sizes),
                "engine_rounds": list(plan.engine_rounds),
                "reader_rounds": plan.reader_rounds,
            },
            "engine_delta_chars": len(DELTA),
            "reader_piece_chars": PIECE,
        },
        "paths": rows,
        "engine_over_floor": engine_over_floor,
        "targets": [
            {
                "name": f"{row['name']}: CPU s per MB, {label(plan.sizes[-1])} / {label(plan.sizes[0])}",
                "value": row["ratio"],
                "target": f"<= {TARGET_RATIO}",
                "passed": row["ratio"] <= TARGET_RATIO,
            }
            for row in rows
        ],
    }


def figures_of(per_mb_figures: list[float], plan: Plan) -> dict[str, Any]:
    return {
        "cpu_s_per_mb": dict(zip((label(size) for size in plan.sizes), per_mb_figures, strict=True)),
        "ratio": per_mb_figures[-1] / per_mb_figures[0],
    }


def label(size: float) -> str:
    return f"{size:g} MB" if size >= 1 else f"{size * 1024:g} KB"


# -- report --------------------------------------------------------------------------------


def print_report(console: Console, report: dict[str, Any]) -> None:
    env = report["environment"]
    console.rule("[bold]Environment")
    console.print(
        f"{env['python']}, LittleGhost {env['littleghost']}, {env['platform']}; sizes {env['plan']['sizes_mb']} MB, "
        f"rounds {env['plan']['engine_rounds']} (floor, engine) and {env['plan']['reader_rounds']} (readers); "
        f"engine deltas of {env['engine_delta_chars']} characters, reader pieces of {env['reader_piece_chars']}"
    )
    sizes = list(report["paths"][0]["cpu_s_per_mb"])

    console.rule("[bold]1-3. CPU seconds per MB of streamed answer")
    table = Table(show_header=True, header_style="bold")
    table.add_column("path")
    for size in sizes:
        table.add_column(size, justify="right")
    table.add_column(f"{sizes[-1]} / {sizes[0]}", justify="right")
    for row in report["paths"]:
        table.add_row(row["name"], *(f"{value:.4f}" for value in row["cpu_s_per_mb"].values()), f"{row['ratio']:.2f}")
    console.print(table)
    ratios = ", ".join(f"{size}: {ratio:.2f}" for size, ratio in zip(sizes, report["engine_over_floor"], strict=True))
    console.print(f"Engine / floor, per MB: {ratios}")

    console.rule("[bold]4. Targets")
    table = Table(show_header=True, header_style="bold")
    table.add_column("target")
    table.add_column("measured", justify="right")
    table.add_column("goal", justify="right")
    table.add_column("result", justify="center")
    for row in report["targets"]:
        table.add_row(
            row["name"], f"{row['value']:.2f}", row["target"], "[green]PASS" if row["passed"] else "[red]FAIL"
        )
    console.print(table)
    failed = [row["name"] for row in report["targets"] if not row["passed"]]
    console.rule()
    console.print("[red]Missed: " + "; ".join(failed) if failed else "[green]All targets met.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CPU seconds per MB of a streamed answer, for 1, 4 and 16 MB answers.")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run: 64 KB, 256 KB and 1 MB, one round each")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--dir", type=Path, help="where to put the SQLite file (default: a new temporary directory)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)

    plan = QUICK if args.quick else FULL
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="lg-bench-", dir=args.dir))
    try:
        report = run_benchmark(plan, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(Console(width=None if sys.stdout.isatty() else 140), report)
    missed = any(not row["passed"] for row in report["targets"])
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
