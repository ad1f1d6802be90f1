"""A tool that returns ``EndsRun`` ends its run: once its turn's calls are done, the run completes
with the value as ``RunResult.ended_by``, every call of the turn answered, and no further model turn."""

from __future__ import annotations

from lg_core import Agent, Tool, after_invocation
from lg_core.tool import EndsRun


class FinishTool(Tool):
    tool_name = "finish"
    description = "Finish with a value."

    def call(self, input):
        return EndsRun({"code": input.get("code")}, reply="Finished.")


class NoteTool(Tool):
    tool_name = "note"
    description = "Take a note."

    def call(self, input):
        return "noted"


def test_a_tool_returning_ends_run_completes_the_run_with_its_value(config, script):
    target = script(
        [
            {
                "text": "wrapping up",
                "tool_calls": [
                    {"name": "note", "arguments": {}},
                    {"name": "finish", "arguments": {"code": 7}},
                ],
            }
        ]
    )
    worker = type("WorkerAgent", (Agent,), {"model": target, "tools": [FinishTool, NoteTool]})

    run = worker.ask("Go")

    assert run.completed, run.error
    assert run.result.ended_by == {"tool": "finish", "value": {"code": 7}}
    assert run.result.stop_reason == "tool_use"
    assert run.response == "wrapping up"
    last = run.result.messages[-1]
    assert last.role == "tool"
    assert [block.status for block in last.content] == ["success", "success"]
    again = config.runtime().get_run(run.id)
    assert again.result.ended_by == {"tool": "finish", "value": {"code": 7}}


def test_a_tool_error_does_not_end_the_run(config, script):
    class RefusingTool(Tool):
        tool_name = "finish"
        description = "Refuses."

        def call(self, input):
            from lg_core.errors import ToolError

            raise ToolError("not yet")

    target = script([{"tool_calls": [{"name": "finish", "arguments": {}}]}, {"text": "answered instead"}])
    worker = type("WorkerAgent", (Agent,), {"model": target, "tools": [RefusingTool]})

    run = worker.ask("Go")

    assert run.completed, run.error
    assert run.result.ended_by is None
    assert run.response == "answered instead"


def test_after_invocation_sees_a_result_a_tool_ended(config, script):
    seen = []

    class WatchedAgent(Agent):
        model = script([{"tool_calls": [{"name": "finish", "arguments": {"code": 1}}]}])
        tools = [FinishTool]

        @after_invocation
        def note_result(self, payload):
            seen.append(payload["result"].ended_by)

    run = WatchedAgent.ask("Go")

    assert run.completed, run.error
    assert seen == [{"tool": "finish", "value": {"code": 1}}]
