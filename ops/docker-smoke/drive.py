"""Run inside a LittleGhost container by ops/docker-smoke.sh; prints one JSON line per command.

python /app/src/drive.py support          # a run from start_execution to its terminal event
python /app/src/drive.py start-slow       # starts a SlowAgent run, prints its id
python /app/src/drive.py wait RUN_ID      # waits for it (re-attached by id), with its tool events
"""

from __future__ import annotations

import json
import sys
import time

from smokeapp.agents import SlowAgent, SupportAgent

import lg_core


def support() -> dict:
    execution = SupportAgent.start_execution("Can I get a refund?", actor_id="user-7", session_id="smoke-42")
    types = []
    for event in execution.events():
        types.append(event.type)
        if event.terminal:
            break
    run = execution.wait(timeout=60)
    return {"run_id": execution.run_id, "outcome": run.outcome, "response": run.response, "events": types}


def wait(run_id: str) -> dict:
    started = time.monotonic()
    run = lg_core.get_execution(run_id).wait(timeout=180)
    tools = []
    for event in lg_core.get_execution(run_id).events():
        if event.type.startswith("tool_execution"):
            tools.append(event.type)
        if event.terminal:
            break
    return {
        "run_id": run_id,
        "outcome": run.outcome,
        "response": run.response,
        "waited_s": round(time.monotonic() - started, 1),
        "tool_events": tools,
    }


def main(argv: list[str]) -> None:
    command = argv[0]
    if command == "support":
        result = support()
    elif command == "start-slow":
        result = {"run_id": SlowAgent.start_execution("Read both entries.").run_id}
    elif command == "wait":
        result = wait(argv[1])
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
