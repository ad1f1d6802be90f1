"""Code mode on an Agent, run locally on the real bwrap: the model calls ``exec``, ``wait`` and ``stop``
and every tool call its program makes goes through the agent's normal tool path.

A scripted model drives each run (a function of the request, so it can react to
what the previous observation said); the assertions read what the model was told
and what the run's event log and callbacks recorded.
"""

from __future__ import annotations

import json
import threading
import time

import psutil
import pytest

from lg_core import Agent, Tool, after_tool, before_tool
from lg_core.callbacks import cancel, replace
from lg_core.code_mode.active_sessions import ACTIVE_SESSIONS
from lg_core.errors import ToolError
from lg_core.tool import success_outcome
from tests.sandbox.conftest import requires_bwrap

pytestmark = requires_bwrap

LOOKUP_SECONDS = 0.6
PARALLEL_LOOKUPS = (
    "results = tools.parallel(\n"
    "    lambda: tools.help_center_lookup(query='refund policy'),\n"
    "    lambda: tools.help_center_lookup(query='shipping policy'),\n"
    ")\n"
    "text('\\n'.join(results))\n"
    "len(results)\n"
)


class HelpCenterLookupTool(Tool):
    tool_name = "help_center_lookup"
    description = "Find a support answer by topic."
    input_schema = {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": False,
    }
    keys: list[str | None] = []

    def call(self, input):
        type(self).keys.append(self.idempotency_key)
        time.sleep(LOOKUP_SECONDS)
        entries = {
            "refund policy": "Refunds are available within 30 days.",
            "shipping policy": "Standard shipping takes three to five days.",
        }
        return entries.get(input["query"], "No matching entry.")


class InventoryTool(Tool):
    tool_name = "inventory"
    description = "Stock of a product, as JSON."
    input_schema = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}

    def call(self, input):
        if input["sku"] == "missing":
            raise ToolError(f"no product {input['sku']!r}")
        return json.dumps({"sku": input["sku"], "count": 3})


class ConfirmTool(Tool):
    description = "Confirm the answer with the user."

    def call(self, input):
        return "confirmed"


class ScriptedModel:
    """A scripted model that sends ``first`` and then, while the program is still working, ``then``."""

    def __init__(self, script, first, then=None, final="Done."):
        self.requests = []
        self.observations = []
        self.first, self.then, self.final = first, then, final
        self.target = script(self.turn)

    def turn(self, request):
        self.requests.append(request)
        last = request.messages[-1]
        if last.role == "tool":
            text = last.tool_results[0].text
            observation = json.loads(text) if text.startswith("{") else {"text": text}
            self.observations.append(observation)
            if observation.get("status") == "still_working" and self.then is not None:
                return {"tool_calls": [self.then(len(self.observations))]}
            return {"text": self.final}
        return {"tool_calls": [self.first]}


def control(name, call_id, **arguments):
    return {"name": name, "id": call_id, "arguments": arguments}


def agent_for(model, *tools, code_mode=True, limits=None, **attributes):
    attributes = {"model": model.target, "tools": list(tools), "code_mode": code_mode, **attributes}
    if limits is not None:
        attributes["limits"] = limits
    return type("ResearchAgent", (Agent,), attributes)


def stops(run):
    return [event.data for event in run.events() if event.type == "tool_execution_stop"]


@pytest.fixture(autouse=True)
def short_observation_window(monkeypatch):
    """The one-minute window, shortened so a program outlives exec in a test's time."""
    monkeypatch.setattr("lg_core.engine._code_exec.OBSERVATION_SECONDS", 1.0)
    HelpCenterLookupTool.keys = []


def test_a_program_composes_the_agents_tools_in_parallel_through_exec(script):
    model = ScriptedModel(script, control("exec", "p1", code=PARALLEL_LOOKUPS))
    agent = agent_for(model, HelpCenterLookupTool, InventoryTool)

    started = time.monotonic()
    run = agent.ask("What are the refund and shipping policies?")

    assert run.outcome == "completed", run.error
    assert model.observations == [
        {
            "status": "completed",
            "output": "Refunds are available within 30 days.\nStandard shipping takes three to five days.",
            "value": 2,
        }
    ]
    assert time.monotonic() - started < 2 * LOOKUP_SECONDS + 3  # the two lookups overlapped
    # The model is offered the controls only; the tools are Python functions in its instructions.
    first = model.requests[0]
    assert [tool.name for tool in first.tools] == ["exec", "wait", "stop"]
    assert "def help_center_lookup(*, query: str) -> Any" in first.system
    assert "def inventory(*, sku: str) -> Any" in first.system


def test_brokered_calls_are_events_of_the_run_by_tool_name_and_the_controls_are_not(script):
    model = ScriptedModel(script, control("exec", "p1", code=PARALLEL_LOOKUPS))
    run = agent_for(model, HelpCenterLookupTool).ask("Policies?")

    assert run.outcome == "completed", run.error
    brokered = stops(run)
    assert sorted(event["output"] for event in brokered) == [
        "Refunds are available within 30 days.",
        "Standard shipping takes three to five days.",
    ]
    assert {event["name"] for event in brokered} == {"help_center_lookup"}
    assert {event["id"] for event in brokered} == {"p1/call-1", "p1/call-2"}
    # Each call's idempotency key derives from the exec step's key and the call's number in the program.
    keys = sorted(HelpCenterLookupTool.keys)
    assert [key.rsplit("/", 1)[1] for key in keys] == ["call-1", "call-2"]
    assert all(key.startswith(f"{run.id}/") and "/tool/p1/" in key for key in keys)


def test_a_program_that_outlives_exec_is_watched_by_wait_and_its_later_calls_run_in_that_step(script):
    code = (
        "import time\n"
        "print('started')\n"
        "time.sleep(2.0)\n"
        "answer = tools.help_center_lookup(query='refund policy')\n"
        "print('looked up')\n"
        "answer\n"
    )
    model = ScriptedModel(script, control("exec", "p1", code=code), then=lambda n: control("wait", f"w{n}"))
    run = agent_for(model, HelpCenterLookupTool).ask("Refunds?")

    assert run.outcome == "completed", run.error
    first, *later = model.observations
    assert first == {"status": "still_working", "output": "started\n"}
    assert later[-1]["status"] == "completed"
    assert later[-1]["value"] == "Refunds are available within 30 days."
    assert "".join(observation["output"] for observation in later) == "looked up\n"
    assert [event["name"] for event in stops(run)] == ["help_center_lookup"]


def test_stop_ends_a_program_that_is_still_working(script):
    model = ScriptedModel(
        script,
        control("exec", "p1", code="import time\nprint('working')\ntime.sleep(600)\n"),
        then=lambda n: control("wait", "w1") if n == 1 else control("stop", "s1"),
    )
    started = time.monotonic()
    run = agent_for(model, HelpCenterLookupTool).ask("Start and stop")

    assert run.outcome == "completed", run.error
    assert [observation["status"] for observation in model.observations] == [
        "still_working",
        "still_working",
        "terminated",
    ]
    assert time.monotonic() - started < 60


def test_a_program_over_its_tool_call_limit_gets_an_error_at_the_call_past_it(script):
    code = (
        "tools.inventory(sku='a')\n"
        "try:\n"
        "    tools.inventory(sku='b')\n"
        "except ToolCallError as error:\n"
        "    finish(str(error))\n"
    )
    model = ScriptedModel(script, control("exec", "p1", code=code))
    run = agent_for(model, InventoryTool, code_mode={"limits": {"tool_calls": 1}}).ask("Stock?")

    assert run.outcome == "completed", run.error
    assert model.observations[0]["value"] == "the program reached its limit of 1 tool calls"


def test_a_program_past_its_lifetime_is_stopped_with_an_error(script):
    model = ScriptedModel(
        script,
        control("exec", "p1", code="import time\ntime.sleep(600)\n"),
        then=lambda n: control("wait", f"w{n}"),
    )
    run = agent_for(model, InventoryTool, code_mode={"limits": {"wall_seconds": 2}}).ask("Sleep")

    assert run.outcome == "completed", run.error
    assert model.observations[-1]["status"] == "error"
    assert "exceeded its lifetime of 2 seconds" in model.observations[-1]["error"]


def test_brokered_calls_share_the_agents_tool_call_limit(script):
    code = (
        "results = []\n"
        "for sku in 'abc':\n"
        "    try:\n"
        "        results.append(tools.inventory(sku=sku)['count'])\n"
        "    except ToolCallError as error:\n"
        "        results.append(str(error))\n"
        "results\n"
    )
    model = ScriptedModel(script, control("exec", "p1", code=code))
    run = agent_for(model, InventoryTool, limits={"max_tool_calls": 2}).ask("Stock?")

    assert run.outcome == "completed", run.error
    assert model.observations[0]["value"] == [3, 3, "the agent reached its limit of 2 tool calls"]


def test_a_program_that_raises_is_an_error_result_with_its_traceback(script):
    model = ScriptedModel(script, control("exec", "p1", code="x = 1\nraise ValueError('boom')\n"))
    run = agent_for(model, InventoryTool).ask("Fail")

    assert run.outcome == "completed", run.error
    observation = model.observations[0]
    assert observation["status"] == "error"
    assert "ValueError: boom" in observation["error"]
    tool_message = run.result.messages[2]
    assert tool_message.tool_results[0].status == "error"


def test_a_tool_failure_raises_inside_the_program_where_it_can_be_handled(script):
    code = (
        "try:\n"
        "    tools.inventory(sku='missing')\n"
        "except ToolCallError as error:\n"
        "    finish('handled: ' + str(error))\n"
    )
    model = ScriptedModel(script, control("exec", "p1", code=code))
    run = agent_for(model, InventoryTool).ask("Stock?")

    assert run.outcome == "completed", run.error
    assert model.observations[0] == {"status": "completed", "output": "", "value": "handled: no product 'missing'"}
    assert [(event["name"], event["status"]) for event in stops(run)] == [("inventory", "error")]


def test_the_agents_tool_callbacks_run_for_brokered_calls_and_may_refuse_or_replace_them(script):
    seen = []
    lock = threading.Lock()

    @before_tool
    def guard(self, payload, context):
        with lock:
            seen.append(("before", payload["tool_use"].name, dict(payload["tool_use"].input)))
        if payload["tool_use"].input.get("sku") == "secret":
            return cancel("not allowed to read secret stock")
        return None

    @after_tool
    def relabel(self, payload, context):
        with lock:
            seen.append(("after", payload["tool_use"].name, dict(payload["tool_use"].input)))
        return replace({**payload, "result": success_outcome(json.dumps({"count": 99}))})

    code = (
        "allowed = tools.inventory(sku='open')['count']\n"
        "try:\n"
        "    tools.inventory(sku='secret')\n"
        "except ToolCallError as error:\n"
        "    refused = str(error)\n"
        "[allowed, refused]\n"
    )
    model = ScriptedModel(script, control("exec", "p1", code=code))
    agent = agent_for(model, InventoryTool, guard=guard, relabel=relabel)
    run = agent.ask("Stock?")

    assert run.outcome == "completed", run.error
    assert model.observations[0]["value"] == [99, "not allowed to read secret stock"]
    assert seen == [
        ("before", "inventory", {"sku": "open"}),
        ("after", "inventory", {"sku": "open"}),
        ("before", "inventory", {"sku": "secret"}),
    ]


def test_invalid_arguments_are_refused_by_the_tools_schema_inside_the_program(script):
    code = "try:\n    tools.inventory(sku=5)\nexcept ToolCallError as error:\n    finish(str(error))\n"
    model = ScriptedModel(script, control("exec", "p1", code=code))
    run = agent_for(model, InventoryTool).ask("Stock?")

    assert run.outcome == "completed", run.error
    assert model.observations[0]["value"].startswith("Invalid input for tool 'inventory'")


def test_a_tool_kept_by_except_stays_in_the_conversation_and_out_of_programs(script):
    model = ScriptedModel(script, control("confirm", "c1"))
    agent = agent_for(model, InventoryTool, ConfirmTool, code_mode={"except": ["confirm"]})
    run = agent.ask("Confirm")

    assert run.outcome == "completed", run.error
    first = model.requests[0]
    assert [tool.name for tool in first.tools] == ["exec", "wait", "stop", "confirm"]
    assert "def inventory(" in first.system and "def confirm(" not in first.system
    assert run.result.messages[2].tool_results[0].text == "confirmed"


def test_the_model_calling_a_program_tool_directly_is_told_to_use_exec(script):
    model = ScriptedModel(script, control("inventory", "i1", sku="a"))
    run = agent_for(model, InventoryTool).ask("Stock?")

    assert run.outcome == "completed", run.error
    result = run.result.messages[2].tool_results[0]
    assert result.status == "error"
    assert "available only inside code-mode programs" in result.text
    assert "tools.inventory(...)" in result.text


def test_wait_without_a_running_program_is_an_error_the_model_reads(script):
    model = ScriptedModel(script, control("wait", "w1"))
    run = agent_for(model, InventoryTool).ask("Wait")

    assert run.outcome == "completed", run.error
    result = run.result.messages[2].tool_results[0]
    assert json.loads(result.text)["status"] == "terminated"


def test_cancelling_the_run_during_exec_ends_the_program_and_its_sandbox(script):
    code = "import os, time\ntext(str(os.getpid()))\ntime.sleep(600)\n"
    model = ScriptedModel(script, control("exec", "p1", code=code))
    before = set(ACTIVE_SESSIONS.run_ids())
    execution = agent_for(model, InventoryTool).start_execution("Sleep")
    deadline = time.monotonic() + 30
    while execution.run_id not in ACTIVE_SESSIONS.run_ids():
        assert time.monotonic() < deadline, "exec never started the program"
        time.sleep(0.05)
    time.sleep(0.5)  # the program is running inside exec's observation window
    assert sandboxed_programs()
    execution.cancel()
    run = execution.wait(timeout=30)

    assert run.outcome == "cancelled"
    assert set(ACTIVE_SESSIONS.run_ids()) == before, "the run's session was closed with it"
    assert not sandboxed_programs()


def sandboxed_programs():
    """This process's children running a program's bwrap (their arguments name its temporary workspace)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "lg-code-" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass  # it ended while we looked
    return found


class ChargeTool(Tool):
    description = "Charge the customer once."
    at_most_once = True

    def call(self, input):
        return "charged"


def test_an_at_most_once_tool_stays_in_the_conversation_where_its_own_step_keeps_the_promise(script):
    model = ScriptedModel(script, control("charge", "c1"))
    run = agent_for(model, InventoryTool, ChargeTool).ask("Charge")

    assert run.outcome == "completed", run.error
    first = model.requests[0]
    assert [tool.name for tool in first.tools] == ["exec", "wait", "stop", "charge"]
    assert "def charge(" not in first.system
    assert run.result.messages[2].tool_results[0].text == "charged"
