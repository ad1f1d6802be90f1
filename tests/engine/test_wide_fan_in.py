"""A turn with many parallel tool calls completes on every durable store, each call run once.

The calls' commits race for their turn's frame, and a commit that loses rolls
back and tries again. On PostgreSQL a lost race aborts a pipelined
transaction; a connection reused after that once failed every later commit
with "prepared statement ... does not exist", so a turn of 60 calls on 16
threads raised out of ``ask`` (lg_core.store.database: ``_discard_after_error``).
Now the calls of one process commit in turn under their frame's lock
(lg_core.engine._frame_locks), each from the frame its predecessor left, so
none loses a race: before, 60 calls on 16 threads lost about 320.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from lg_core import Agent, Configuration, Tool, with_configuration
from lg_core.providers import scripted
from lg_core.store import RunStore

CALLS = 60


class CountTool(Tool):
    tool_name = "count"
    description = "Count a call."
    input_schema = {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}
    seen: list[int] = []
    lock = threading.Lock()

    def call(self, input: dict[str, Any]) -> int:
        with CountTool.lock:
            CountTool.seen.append(input["i"])
        return input["i"]


def test_sixty_parallel_tool_calls_complete_and_each_runs_once(durable_url, monkeypatch):
    lost: list[str | None] = []
    commit = RunStore.commit

    def counting_commit(self: RunStore, step_commit: Any, *now: float) -> Any:
        result = commit(self, step_commit, *now)
        if not result.applied:
            lost.append(result.reason)
        return result

    monkeypatch.setattr(RunStore, "commit", counting_commit)
    model = f"fan-{uuid.uuid4().hex[:8]}"
    scripted.register(
        model, [{"tool_calls": [{"name": "count", "arguments": {"i": i}} for i in range(CALLS)]}, {"text": "done"}]
    )
    CountTool.seen = []
    agent = type(
        "FanAgent", (Agent,), {"model": f"scripted:{model}", "tools": [CountTool], "limits": {"max_tool_calls": CALLS}}
    )
    configuration = Configuration(run_store=durable_url, max_parallel_tools=16)
    try:
        with with_configuration(configuration):
            run = agent.ask("Count them all.")
            assert run.outcome == "completed", run.error
            assert run.response == "done"
            assert sorted(CountTool.seen) == list(range(CALLS))
            results = [m for m in run.result.messages if m.role == "tool"]
            assert sum(len(m.content) for m in results) == CALLS
            assert lost == []
    finally:
        configuration.close()
        scripted.unregister(model)
