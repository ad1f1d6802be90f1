"""Agents used by the distributed tests; every worker imports this module (LG_IMPORTS).

Tools log each call to $DIST_APP_LOG ("<tool> <n> <idempotency key>") so tests
can prove which calls ran and how often. $DIST_APP_HANG names a call
("<tool>:<n>") that blocks after logging, and $DIST_APP_READY_DIR receives a
file "<tool>-<n>-<pid>" when it does, so a test can kill the process that
runs it mid-call ($DIST_APP_HANG_SECONDS: how long it blocks, 300 by default,
i.e. until killed). $DIST_APP_CLOCK_SKEW (seconds) shifts time.time in the
process that imports this module: a worker on a host whose clock is off.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from lg_core import Agent, Tool, after_model
from lg_core.errors import ToolError
from lg_core.providers import scripted
from lg_core.tools import Filesystem, Shell

TURNS = 6


def _skew_clock() -> None:
    """Add $DIST_APP_CLOCK_SKEW seconds to time.time in this process (every module reads it from here)."""
    skew = float(os.environ.get("DIST_APP_CLOCK_SKEW") or 0)
    if skew:
        real_time = time.time
        time.time = lambda: real_time() + skew


_skew_clock()


def _log(tool: str, n: int, key: str) -> None:
    path = os.environ.get("DIST_APP_LOG")
    if not path:
        return
    with open(path, "a") as handle:
        handle.write(f"{tool} {n} {key}\n")
        handle.flush()
        os.fsync(handle.fileno())


def _maybe_hang(tool: str, n: int, key: str = "") -> None:
    """Block if $DIST_APP_HANG (comma-separated "<tool>:<n>") names this call.

    With $DIST_APP_HANG_ONCE=1 each call (by ``key``) hangs only the first time,
    so the execution that takes it over after a kill runs through.
    """
    if f"{tool}:{n}" not in os.environ.get("DIST_APP_HANG", "").split(","):
        return
    ready_dir = Path(os.environ["DIST_APP_READY_DIR"])
    if os.environ.get("DIST_APP_HANG_ONCE") == "1":
        marker = ready_dir / ("once-" + key.replace("/", "_"))
        try:
            marker.touch(exist_ok=False)
        except FileExistsError:
            return
    suffix = "" if tool != "model" else f"-{threading.get_ident()}"
    draft = ready_dir / f".{tool}-{n}-{os.getpid()}{suffix}"
    draft.write_text(str(os.getpid()))
    draft.rename(ready_dir / draft.name[1:])  # renamed into place: a reader never sees it empty
    threading.Event().wait(float(os.environ.get("DIST_APP_HANG_SECONDS") or 300))


class StepTool(Tool):
    description = "Record one numbered step."
    input_schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }

    def call(self, input):
        _log(self.tool_name, input["n"], self.idempotency_key)
        _maybe_hang(self.tool_name, input["n"], self.idempotency_key)
        if os.environ.get("DIST_APP_TOOL_DELAY"):
            time.sleep(float(os.environ["DIST_APP_TOOL_DELAY"]))
        return f"step {input['n']} done"


class ChargeTool(StepTool):
    tool_name = "charge"
    description = "Charge the card; must never run twice."
    at_most_once = True


class GateTool(StepTool):
    """Passes gate n at once, unless the test holds it (a file "hold-<n>" in $DIST_APP_READY_DIR).

    A held gate announces itself ("gate-<n>-<pid>") and waits, checking its
    context, so a cancel from any process stops it; removing the file releases it.
    """

    tool_name = "gate"
    description = "Pass numbered gate n."

    def call(self, input):
        n = input["n"]
        _log(self.tool_name, n, self.idempotency_key)
        folder = os.environ.get("DIST_APP_READY_DIR")
        hold = Path(folder) / f"hold-{n}" if folder else None
        if hold is not None and hold.exists():
            draft = Path(folder) / f".gate-{n}-{os.getpid()}"
            draft.write_text(str(os.getpid()))
            draft.rename(draft.with_name(draft.name[1:]))  # a reader never sees it empty
            while hold.exists():
                self.context.check()
                time.sleep(0.05)
        return f"gate {n} passed"


GATES = 3


def _gates(request) -> dict:
    """Gates 0..GATES-1, one per turn, then echo the last message (an interjection, if one came)."""
    sequence = int(request.metadata.get("sequence", 0))
    if sequence < GATES:
        return {"tool_calls": [{"name": "gate", "arguments": {"n": sequence}}]}
    return {"text": "You said: " + request.messages[-1].text}


def _steps(tool: str, turns: int = TURNS) -> list[dict]:
    return [{"tool_calls": [{"name": tool, "arguments": {"n": n}}]} for n in range(turns)] + [
        {"text": "All steps recorded."}
    ]


scripted.register("dist-steps", _steps("step"))
scripted.register("dist-charge", _steps("charge"))
scripted.register("dist-slow", [{"text": "A slow and thoughtful answer, streamed word by word.", "delay": 1.0}])
scripted.register("dist-gates", _gates)
# Streamed word by word with a pause, as a real model streams: an interjection can land mid-answer.
scripted.register("dist-echo", lambda request: {"text": "You said: " + request.messages[-1].text, "delta_delay": 0.01})


class StepAgent(Agent):
    model = "scripted:dist-steps"
    tools = [StepTool]


class ChargeAgent(Agent):
    model = "scripted:dist-charge"
    tools = [ChargeTool]


class SlowAgent(Agent):
    model = "scripted:dist-slow"


class EchoAgent(Agent):
    model = "scripted:dist-echo"


class GatewayAgent(Agent):
    """Answers through the ``gateway`` connection, which the process's LG_PROVIDERS configures."""

    model = "gateway:gpt-test"


class SameAnswerTool(Tool):
    """Always the same answer: a model that keeps calling it is in a tool loop."""

    tool_name = "same_answer"
    description = "Look up an entry that never changes."

    def call(self, input):
        _log(self.tool_name, 0, self.idempotency_key)
        return "No entry."


# A model that never stops asking for the same lookup.
scripted.register(
    "dist-loop", lambda request: {"tool_calls": [{"name": "same_answer", "arguments": {"topic": "refunds"}}]}
)


class LoopingAgent(Agent):
    model = "scripted:dist-loop"
    tools = [SameAnswerTool]
    detect_tool_loops = True


# -- chaos tests (tests/chaos) ----------------------------------------------------------
# Models that log each call to $DIST_APP_LOG.models ("model <sequence> <run id>"), can
# hang mid-turn ($DIST_APP_HANG="model:<sequence>") and take $DIST_APP_MODEL_DELAY
# seconds per turn; short scripts for the soak. $DIST_APP_TOOL_DELAY slows every tool.


def _logged_script(tool: str, turns: int, delay: float = 0.0):
    script = _steps(tool, turns)

    def turn(request):
        sequence = int(request.metadata.get("sequence", 0))
        run_id = str(request.metadata.get("run_id", ""))
        path = os.environ.get("DIST_APP_LOG")
        if path:
            with open(path + ".models", "a") as handle:
                handle.write(f"model {sequence} {run_id}\n")
        _maybe_hang("model", sequence, f"{run_id}/model-{sequence}")
        pause = float(os.environ.get("DIST_APP_MODEL_DELAY", delay))
        return {**script[sequence], **({"delay": pause} if pause else {})}

    return turn


scripted.register("dist-steps-hang", _logged_script("step", TURNS))
scripted.register("dist-charge-hang", _logged_script("charge", TURNS))
SHORT_TURNS = 2
scripted.register("dist-steps-short", _logged_script("step", SHORT_TURNS, delay=0.02))
scripted.register("dist-charge-short", _logged_script("charge", SHORT_TURNS, delay=0.02))


class HangStepAgent(Agent):
    model = "scripted:dist-steps-hang"
    tools = [StepTool]


class HangChargeAgent(Agent):
    model = "scripted:dist-charge-hang"
    tools = [ChargeTool]


class ShortStepAgent(Agent):
    model = "scripted:dist-steps-short"
    tools = [StepTool]


class ShortChargeAgent(Agent):
    model = "scripted:dist-charge-short"
    tools = [ChargeTool]


class GateAgent(Agent):
    model = "scripted:dist-gates"
    tools = [GateTool]


def _session_turn(request) -> dict:
    """Sessions: pass one gate per run, numbered by the user messages the run was shown, then say what it saw."""
    users = [m.text for m in request.messages if m.role == "user"]
    if request.messages[-1].role == "user":
        return {"tool_calls": [{"name": "gate", "arguments": {"n": len(users)}}]}
    return {"text": "seen: " + " | ".join(users)}


scripted.register("dist-session", _session_turn)


class SessionAgent(Agent):
    """Its answer lists every user message of the session it received
    (tests/distributed/test_sessions_distributed.py)."""

    model = "scripted:dist-session"
    tools = [GateTool]


class AuditFailed(RuntimeError):
    """Raised with model content in its message (test_executions: it must not leave the worker)."""


scripted.register("dist-secret", [{"text": "Customer SSN is 123-45-6789"}])


class SecretAgent(Agent):
    """Fails in after_model with the model's text in the error, under capture_diagnostics = False."""

    model = "scripted:dist-secret"
    capture_diagnostics = False

    @after_model
    def audit(self, payload):
        raise AuditFailed("could not audit: " + payload["response"].message.text)


class RequestIdTool(Tool):
    """Returns the ExecutionState's request id as the worker running it sees it."""

    description = "Which request is this?"
    input_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def call(self, input):
        from lg_core import ExecutionState

        return f"request={ExecutionState['request_id']} pid={os.getpid()}"


def _say_tool_result(request):
    """Call request_id, then answer with what it returned."""
    results = [b for m in request.messages for b in m.content if getattr(b, "kind", "") == "tool_result"]
    if not results:
        return {"tool_calls": [{"name": "request_id", "arguments": {}}]}
    return {"text": results[-1].text}


scripted.register("dist-request-id", _say_tool_result)


class RequestIdAgent(Agent):
    model = "scripted:dist-request-id"
    tools = [RequestIdTool]


# The provider answers 500 at once: a provider error ends the run as failed.
scripted.register("dist-fail", [{"error": {"kind": "http", "status": 500, "message": "upstream broke"}}])


class FailingAgent(Agent):
    model = "scripted:dist-fail"


# Files through the run's sandbox, on whichever worker runs each step: the workers get the
# workspace and sandbox settings from LG_WORKSPACE and LG_SANDBOX (tests/distributed/test_sandboxed_tools.py).
scripted.register(
    "dist-files",
    [
        {"tool_calls": [{"name": "write_file", "id": "w", "arguments": {"path": "notes/a.md", "content": "first\n"}}]},
        {
            "tool_calls": [
                {
                    "name": "replace_in_file",
                    "id": "r",
                    "arguments": {"path": "notes/a.md", "old_text": "first", "new_text": "second"},
                }
            ]
        },
        {"tool_calls": [{"name": "shell", "id": "s", "arguments": {"command": ["cat", "notes/a.md"]}}]},
        {"text": "Files written."},
    ],
)


class FilesAgent(Agent):
    model = "scripted:dist-files"
    tools = [Filesystem, Shell]


# Code mode on the lg.sandbox workers (tests/distributed/test_code_mode_distributed.py). The user's
# message is the program the model runs with exec; while it is still working the model waits, up to
# the number a "# waits: N" line in the program says (20 by default), then stops it, and answers with
# the last observation's status, value and error and how many observations it made. A "# leave
# running" line makes it answer at once, leaving the program running. $DIST_APP_OBSERVATION_SECONDS
# shortens the one-minute observation window in the workers so a program outlives exec in a test's time.
if os.environ.get("DIST_APP_OBSERVATION_SECONDS"):
    import lg_core.engine._code_exec as _code_exec

    _code_exec.OBSERVATION_SECONDS = float(os.environ["DIST_APP_OBSERVATION_SECONDS"])


def _code_mode_turn(request):
    import json
    import re

    program = request.messages[0].text
    observations = [message for message in request.messages if message.role == "tool"]
    if not observations:
        return {"tool_calls": [{"name": "exec", "id": "program", "arguments": {"code": program}}]}
    last = json.loads(observations[-1].tool_results[0].text)
    if last["status"] == "still_working" and "# leave running" not in program:
        waits = re.search(r"# waits: (\d+)", program)
        control = "wait" if len(observations) <= (int(waits.group(1)) if waits else 20) else "stop"
        return {"tool_calls": [{"name": control, "id": f"{control}-{len(observations)}", "arguments": {}}]}
    answer = {"status": last["status"], "value": last.get("value"), "error": last.get("error")}
    return {"text": json.dumps({**answer, "observations": len(observations)})}


scripted.register("dist-code-mode", _code_mode_turn)


class LookupTool(Tool):
    description = "Look a topic up (logged, with its idempotency key); n < 0 fails."
    input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    def call(self, input):
        _log(self.tool_name, input["n"], self.idempotency_key)
        if input["n"] < 0:
            raise ToolError(f"no topic {input['n']}")
        return f"answer {input['n']}"


class CodeModeAgent(Agent):
    model = "scripted:dist-code-mode"
    tools = [LookupTool]
    code_mode = {"limits": {"tool_calls": 3}}
