"""A run driven from a tool of another run, on the same runtime's LocalDispatcher.

An agent used as a tool (``Inner.ask(...)`` inside ``call``) drives its run on
the pool thread of the outer tool call. When the outer turn's calls hold every
pool thread, the inner runs' parallel tool calls can never get one: before the
dispatcher ran a queued step on the waiting thread itself, both runs waited on
each other for ever.
"""

from __future__ import annotations

import threading

from lg_core import Agent, Configuration, Tool, with_configuration


class LeafTool(Tool):
    tool_name = "leaf"
    description = "A leaf."

    def call(self, input):
        return "leaf"


def test_an_agent_asked_from_every_pool_thread_still_runs_its_parallel_calls(script):
    configuration = Configuration(max_parallel_tools=2)
    inner_target = script(
        lambda request: (
            {"text": "inner done"}
            if request.messages[-1].role == "tool"
            else {"tool_calls": [{"name": "leaf", "arguments": {}}, {"name": "leaf", "arguments": {}}]}
        )
    )
    inner = type("InnerAgent", (Agent,), {"model": inner_target, "tools": [LeafTool]})
    both_running = threading.Barrier(2, timeout=30)

    class AskInnerTool(Tool):
        tool_name = "ask_inner"
        description = "Ask the inner agent."

        def call(self, input):
            both_running.wait()  # the two calls hold both pool threads
            with with_configuration(self.runtime.configuration):
                return inner.ask("Question").response

    outer_target = script(
        [
            {"tool_calls": [{"name": "ask_inner", "arguments": {}}, {"name": "ask_inner", "arguments": {}}]},
            {"text": "ok"},
        ]
    )
    outer = type("OuterAgent", (Agent,), {"model": outer_target, "tools": [AskInnerTool]})
    finished: list = []

    def ask() -> None:
        with with_configuration(configuration):
            finished.append(outer.ask("Go"))

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(30)
    hung = thread.is_alive()
    if hung:  # two more threads take the queued inner steps, so the test can end
        pool = configuration.runtime().dispatcher._pool
        pool._max_workers += 2
        pool._adjust_thread_count()
        pool._adjust_thread_count()
        thread.join(10)
    configuration.close()

    assert not hung, "the outer and inner runs waited on each other for a pool thread"
    (run,) = finished
    assert run.outcome == "completed"
    assert [result.text for result in run.result.messages[2].tool_results] == ["inner done", "inner done"]


def test_a_sync_ask_inside_a_coroutine_runs_an_async_tool_alone_in_its_turn(config, script):
    """Called from a coroutine (a FastAPI handler's mistake), ask() runs a turn's only step off
    the loop's thread, so the async tool's asyncio.run can start, as two calls in a turn (on
    pool threads) do; on the loop's thread the model would be told "internal error"."""
    import asyncio

    class AsyncLookupTool(Tool):
        tool_name = "lookup"
        description = "Look a key up."

        async def call(self, input):
            await asyncio.sleep(0)
            return "found"

    agent = type(
        "LoopAgent",
        (Agent,),
        {
            "model": script([{"tool_calls": [{"name": "lookup", "arguments": {}}]}, {"text": "done"}]),
            "tools": [AsyncLookupTool],
        },
    )

    async def handler():
        return agent.ask("look it up")

    run = asyncio.run(handler())
    assert run.completed
    [result] = [block for message in run.result.messages for block in message.content if block.kind == "tool_result"]
    assert result.status == "success" and result.content[0].text == "found"
