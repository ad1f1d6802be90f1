"""A Graph for the distributed tests: every node's Agent records a side effect through a tool.

Workers import it by the Graph's path when they first meet one of its runs. Each
node's Agent calls ``effect`` once with its node's number (logged to $DIST_APP_LOG
as ``effect <n> <idempotency key>`` by dist_app, which can also make a numbered call
hang: $DIST_APP_HANG="effect:<n>", or wait, checking for a cancel, while the file
"hold-effect-<n>" exists in $DIST_APP_READY_DIR), then answers with a fixed text, so an undisturbed
run and a disturbed one give the same answer. While the file "meet-effect-<n>" names a partner
number, call n waits (up to 30 s) until the partner's call has started too: two branches that run at
once meet there, so their overlap in time is certain, and branches chained one after the other do not.

RetryingLookupGraph's one node has a timeout and one retry on AssemblyStepTimeoutError; its model's
first call of all (across every worker process: the file "slowed-lookup" in $DIST_APP_READY_DIR marks
it) takes longer than the timeout, and every later call answers at once. RetryingEffectGraph's one
node retries a ProviderError: its model's first call of all fails ("failed-effect-5" marks it), and
the retry's child calls ``effect`` 5, then answers. DelayedRetryGraph's node fails the same way once
("failed-effect-6"), and its retry, RETRY_DELAY seconds after, calls ``effect`` 6, then answers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import dist_app

from lg_core import Agent, AssemblyStepTimeoutError, Graph, ProviderError, Tool, edge, node
from lg_core.providers import scripted

NODES = {"triage": 1, "ledger": 2, "policy": 3, "respond": 4}
ANSWERS = {
    "triage": "transfer 481",
    "ledger": "The ledger entry is awaiting settlement.",
    "policy": "Pending transfers settle within two business days.",
    "respond": "Transfer 481 settles within two business days.",
}


class EffectTool(Tool):
    tool_name = "effect"
    description = "Record the node's side effect."
    input_schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }

    def call(self, input):
        n = input["n"]
        dist_app._log(self.tool_name, n, self.idempotency_key)
        dist_app._maybe_hang(self.tool_name, n, self.idempotency_key)
        folder = os.environ.get("DIST_APP_READY_DIR")
        hold = Path(folder) / f"hold-effect-{n}" if folder else None
        if folder:
            _meet_partner(Path(folder), n)
        if hold is not None and hold.exists():  # held by the test until it removes the file, or a cancel
            (Path(folder) / f"held-effect-{n}").write_text(str(os.getpid()))
            while hold.exists():
                self.context.check()
                time.sleep(0.05)
        return f"effect {n} recorded"


def _meet_partner(folder: Path, n: int) -> None:
    meet = folder / f"meet-effect-{n}"
    if not meet.exists():
        return
    (folder / f"met-effect-{n}").touch()
    partner = folder / f"met-effect-{meet.read_text().strip()}"
    deadline = time.monotonic() + 30
    while not partner.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def _node_model(name: str):
    def reply(request):
        if request.messages[-1].role == "tool":
            return {"text": ANSWERS[name]}
        return {"tool_calls": [{"name": "effect", "arguments": {"n": NODES[name]}}]}

    return reply


for _name in NODES:
    scripted.register(f"graph-{_name}", _node_model(_name))


class GraphTriageAgent(Agent):
    model = "scripted:graph-triage"
    tools = [EffectTool]


class GraphLedgerAgent(Agent):
    model = "scripted:graph-ledger"
    tools = [EffectTool]


class GraphPolicyAgent(Agent):
    model = "scripted:graph-policy"
    tools = [EffectTool]


class GraphRespondAgent(Agent):
    model = "scripted:graph-respond"
    tools = [EffectTool]


class TransferGraph(Graph):
    """triage, then ledger and policy in parallel, joined at respond."""

    nodes = {
        "triage": GraphTriageAgent,
        "ledger": GraphLedgerAgent,
        "policy": GraphPolicyAgent,
        "respond": GraphRespondAgent,
    }
    start = "triage"
    edges = [edge("triage", "ledger"), edge("triage", "policy"), edge("ledger", "respond"), edge("policy", "respond")]
    finish = "respond"


class LinearTransferGraph(Graph):
    """triage, then respond: one node after the other, no parallel branch."""

    nodes = {"triage": GraphTriageAgent, "respond": GraphRespondAgent}
    start = "triage"
    edges = [edge("triage", "respond")]
    finish = "respond"


class OuterTransferGraph(Graph):
    """A Graph whose one node is a Graph: the nested run is a child run on the workers too."""

    nodes = {"inner": TransferGraph}
    start = "inner"
    finish = "inner"


LOOKUP_ANSWER = "Transfer 481 is awaiting settlement."
LOOKUP_TIMEOUT = 3.0


def _first_of_all(name: str) -> bool:
    """Whether this is the first call to claim the marker ``name`` in $DIST_APP_READY_DIR, in any process."""
    marker = Path(os.environ["DIST_APP_READY_DIR"]) / name
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _slow_once(request):
    """The first call of all waits past the node's timeout (the wait ends at the attempt's deadline)."""
    if _first_of_all("slowed-lookup"):
        return {"text": "too late", "delay": 60}
    (Path(os.environ["DIST_APP_READY_DIR"]) / f"answered-lookup-{os.getpid()}-{time.monotonic_ns()}").touch()
    return {"text": LOOKUP_ANSWER}


scripted.register("graph-slow-once", _slow_once)


class SlowOnceLookupAgent(Agent):
    model = "scripted:graph-slow-once"


class RetryingLookupGraph(Graph):
    """One node that times out on its first attempt and answers on its retry."""

    nodes = {"lookup": node(SlowOnceLookupAgent, timeout=LOOKUP_TIMEOUT, retries=1, retry_on=AssemblyStepTimeoutError)}
    start = "lookup"
    finish = "lookup"


RETRIED_EFFECT = 5
RETRIED_ANSWER = "Transfer 481 was looked up on the second try."


def _fails_once(request):
    """The first call of all fails with a ProviderError; later calls record effect 5, then answer."""
    if _first_of_all(f"failed-effect-{RETRIED_EFFECT}"):
        return {"error": "provider down"}
    if request.messages[-1].role == "tool":
        return {"text": RETRIED_ANSWER}
    return {"tool_calls": [{"name": "effect", "arguments": {"n": RETRIED_EFFECT}}]}


scripted.register("graph-fails-once", _fails_once)


class FailsOnceAgent(Agent):
    model = "scripted:graph-fails-once"
    tools = [EffectTool]


class RetryingEffectGraph(Graph):
    """One node whose first attempt fails with a ProviderError and whose retry records an effect."""

    nodes = {"lookup": node(FailsOnceAgent, retries=2, retry_on=ProviderError)}
    start = "lookup"
    finish = "lookup"


DELAYED_EFFECT = 6
DELAYED_ANSWER = "Transfer 481 was looked up after a pause."
RETRY_DELAY = 8.0


def _fails_once_then_waits(request):
    """The first call of all fails with a ProviderError; later calls record effect 6, then answer."""
    if _first_of_all(f"failed-effect-{DELAYED_EFFECT}"):
        return {"error": "provider down"}
    if request.messages[-1].role == "tool":
        return {"text": DELAYED_ANSWER}
    return {"tool_calls": [{"name": "effect", "arguments": {"n": DELAYED_EFFECT}}]}


scripted.register("graph-fails-once-then-waits", _fails_once_then_waits)


class FailsOnceThenWaitsAgent(Agent):
    model = "scripted:graph-fails-once-then-waits"
    tools = [EffectTool]


class DelayedRetryGraph(Graph):
    """One node whose first attempt fails with a ProviderError and whose retry starts RETRY_DELAY s later."""

    nodes = {"lookup": node(FailsOnceThenWaitsAgent, retries=1, retry_on=ProviderError, retry_delay=RETRY_DELAY)}
    start = "lookup"
    finish = "lookup"
