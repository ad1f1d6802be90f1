"""The agents of bench/distributed.py; every worker imports this module (LG_IMPORTS=distbench.app).

ChainAgent  20 turns with one tool call each and a final text turn (41 steps),
            zero-latency model: section 2, the per-step cost.
LoadAgent   LOAD_TURNS tool turns and a final text turn, each model turn
            taking MODEL_DELAY seconds: section 3 (throughput) and section 5
            (memory).
HangAgent   like ChainAgent but shorter; its tool call n=HANG_AT blocks the
            first time it runs when $BENCH_HANG_DIR is set, after writing
            "<run id>-<pid>" there, so section 4 can SIGKILL the process
            running it mid-call. The call re-executed after the kill returns
            at once (the marker says it already hung).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from lg_core import Agent, Tool
from lg_core.providers import scripted

CHAIN_TURNS = 20
CHAIN_STEPS = 2 * CHAIN_TURNS + 1  # 20 model turns + 20 tool calls + the final model turn
LOAD_TURNS = 2
LOAD_MODEL_TURNS = LOAD_TURNS + 1
LOAD_STEPS = 2 * LOAD_TURNS + 1
MODEL_DELAY = 0.05
HANG_TURNS = 4
HANG_AT = 2


def _script(turns: int, delay: float = 0.0) -> list[dict]:
    pause = {"delay": delay} if delay else {}
    calls = [{"tool_calls": [{"name": "bench_step", "arguments": {"n": n}}], **pause} for n in range(turns)]
    return [*calls, {"text": "All steps recorded.", **pause}]


class BenchStep(Tool):
    tool_name = "bench_step"
    description = "Record one numbered step."
    input_schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }

    def call(self, input):
        return f"step {input['n']} done"


class HangStep(BenchStep):
    """Blocks at call n=HANG_AT the first time (per run) when $BENCH_HANG_DIR is set."""

    tool_name = "hang_step"

    def call(self, input):
        folder = os.environ.get("BENCH_HANG_DIR")
        if folder and input["n"] == HANG_AT:
            run_id = self.idempotency_key.split("/", 1)[0]
            try:
                (Path(folder) / f"once-{run_id}").touch(exist_ok=False)
            except FileExistsError:
                return super().call(input)  # the re-execution after the kill
            draft = Path(folder) / f".hang-{run_id}-{os.getpid()}"
            draft.write_text(str(os.getpid()))
            draft.rename(draft.with_name(draft.name[1:]))  # a reader never sees it empty
            threading.Event().wait(600)
        return super().call(input)


scripted.register("bench-chain", _script(CHAIN_TURNS))
scripted.register("bench-load", _script(LOAD_TURNS, MODEL_DELAY))
scripted.register(
    "bench-hang",
    [
        *([{"tool_calls": [{"name": "hang_step", "arguments": {"n": n}}]} for n in range(HANG_TURNS)]),
        {"text": "Done."},
    ],
)


class ChainAgent(Agent):
    model = "scripted:bench-chain"
    tools = [BenchStep]


class LoadAgent(Agent):
    model = "scripted:bench-load"
    tools = [BenchStep]


class HangAgent(Agent):
    model = "scripted:bench-hang"
    tools = [HangStep]
