"""Streaming a run: event order, early exit, serial delivery and the async forms."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from lg_core import Agent, Tool
from lg_core.events import LIVE_ONLY_EVENTS


def agent_for(target, *tool_classes, **attributes):
    namespace = {"model": target, "tools": list(tool_classes), **attributes}
    return type("StreamAgent", (Agent,), namespace)


class LookupTool(Tool):
    description = "Look up a topic."

    def call(self, input):
        return f"entry for {input.get('topic')}"


def lookup(topic, call_id):
    return {"name": "lookup", "id": call_id, "arguments": {"topic": topic}}


TURNS = [
    {"text": "Let me look.", "tool_calls": [lookup("refunds", "a"), lookup("shipping", "b")]},
    {"text": "Refunds take 30 days and shipping takes three days."},
]


def _waiting_tool(started):
    class WaitTool(Tool):
        tool_name = "wait"
        description = "Blocks until the run is cancelled."

        def call(self, input):
            started.set()
            self.context.cancellation_token.wait(10)
            self.context.check()
            return "not cancelled"

    return WaitTool


# -- order -------------------------------------------------------------------------------------------


def test_streamed_events_come_in_a_consistent_order(config, script):
    run = agent_for(script(TURNS), LookupTool).stream_ask("Refunds and shipping?")
    events = list(run)
    types = [e.type for e in events]

    assert run.outcome == "completed"
    assert types[0] == "invocation_start"
    assert types[-2:] == ["invocation_stop", "run_stop"]
    assert sum(e.terminal for e in events) == 1

    first_stop = types.index("message_stop")
    turn_one = types[: first_stop + 1]
    assert turn_one.index("message_start") < turn_one.index("text_delta") < turn_one.index("tool_call_start")
    for call_id in ("a", "b"):
        call_events = [e.type for e in events if e.data.get("id") == call_id]
        assert call_events == [
            "tool_call_start",
            "tool_call_delta",
            "tool_call_stop",
            "tool_execution_start",
            "tool_execution_stop",
        ], call_id
    assert max(i for i, t in enumerate(types) if t == "tool_execution_stop") < types.index("message_start", first_stop)
    text = "".join(e.data["text"] for e in events[first_stop:] if e.type == "text_delta")
    assert text == run.response


def test_durable_events_are_streamed_with_their_log_sequence_numbers(config, script):
    run = agent_for(script(TURNS), LookupTool).stream_ask("Refunds and shipping?")
    events = list(run)

    numbered = [e for e in events if e.seq is not None]
    assert all(e.type in LIVE_ONLY_EVENTS for e in events if e.seq is None)
    assert [e.seq for e in numbered] == list(range(1, len(numbered) + 1))
    assert [(e.seq, e.type) for e in numbered] == [(e.seq, e.type) for e in run.events()]


def test_on_event_receives_the_same_events_as_iteration(config, script):
    received = []
    run = agent_for(script(TURNS), LookupTool).stream_ask("Refunds and shipping?", on_event=received.append)
    streamed = list(run)

    assert run.outcome == "completed"
    assert received == streamed


def test_ask_on_event_sees_every_durable_event_in_log_order(config, script):
    received = []
    run = agent_for(script(TURNS), LookupTool).ask("Refunds and shipping?", on_event=received.append)

    assert run.outcome == "completed"
    assert "text_delta" in [e.type for e in received]
    durable = [(e.seq, e.type) for e in received if e.type not in LIVE_ONLY_EVENTS]
    assert durable == [(e.seq, e.type) for e in run.events()]


def test_model_retry_is_streamed_before_the_retried_text(config, script):
    target = script([{"error": {"kind": "rate_limit", "message": "busy"}}, {"text": "Back again."}])
    events = list(agent_for(target).stream_ask("Hi"))
    types = [e.type for e in events]

    assert types.count("model_retry") == 1
    assert types.index("model_retry") < types.index("text_delta")
    assert types[-1] == "run_stop"


def test_the_stream_consumer_is_called_serially_during_parallel_tools(config, script):
    tools_barrier = threading.Barrier(2, timeout=30)
    consumer_barrier = threading.Barrier(2, timeout=0.5)
    overlapped = []

    class MeetTool(Tool):
        tool_name = "lookup"
        description = "Meets its sibling."

        def call(self, input):
            tools_barrier.wait()
            return "met"

    def consume(event):
        if event.type == "tool_execution_start":
            try:
                consumer_barrier.wait()
                overlapped.append(event.data["id"])
            except threading.BrokenBarrierError:
                pass

    run = agent_for(script(TURNS), MeetTool).ask("Go", on_event=consume)

    assert run.outcome == "completed"
    assert [r.text for r in run.result.messages[2].tool_results] == ["met", "met"], "the tools ran in parallel"
    assert overlapped == [], "two consumer calls were inside the consumer at once"


# -- early exit --------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_breaking_out_of_a_stream_cancels_the_run_and_returns(config, script):
    started = threading.Event()
    closed = []
    target = script([{"tool_calls": [{"name": "wait", "arguments": {}}]}, {"text": "never"}])
    run = agent_for(target, _waiting_tool(started)).stream_ask("Go")
    run.register(closer=lambda: closed.append(True))

    seen = []
    for event in run:
        seen.append(event.type)
        if event.type == "tool_execution_start":
            break

    assert started.is_set()
    assert run.outcome == "cancelled"
    assert run.response is None
    assert closed == [True]
    assert [e.type for e in run.events()][-1] == "run_cancel"
    assert "run_cancel" not in seen


# -- async forms -------------------------------------------------------------------------------------


def test_ask_async_runs_inside_asyncio(config, script):
    target = script(TURNS)
    Agent_ = agent_for(target, LookupTool)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        run = await Agent_.ask_async("Refunds and shipping?")
        task.cancel()
        return run, ticks

    run, ticks = asyncio.run(main())

    assert run.outcome == "completed"
    assert run.response == TURNS[1]["text"]
    assert ticks > 0, "the event loop kept running while the run executed"


def test_stream_ask_async_yields_events_inside_asyncio(config, script):
    target = script(TURNS)

    async def main():
        stream = agent_for(target, LookupTool).stream_ask_async("Refunds and shipping?")
        types = [event.type async for event in stream]
        return stream.run, types

    run, types = asyncio.run(main())

    assert run.outcome == "completed"
    assert types[0] == "invocation_start"
    assert types[-1] == "run_stop"
    assert "text_delta" in types and "tool_execution_stop" in types


@pytest.mark.timeout(30)
def test_leaving_an_async_stream_early_cancels_the_run(config, script):
    started = threading.Event()
    target = script([{"tool_calls": [{"name": "wait", "arguments": {}}]}, {"text": "never"}])
    Waiting = agent_for(target, _waiting_tool(started))

    async def main():
        stream = Waiting.stream_ask_async("Go")
        iterator = stream.__aiter__()
        async for event in iterator:
            if event.type == "tool_execution_start":
                break
        await iterator.aclose()
        return stream.run

    run = asyncio.run(main())

    assert run.outcome == "cancelled"
    assert [e.type for e in run.events()][-1] == "run_cancel"


@pytest.mark.timeout(30)
def test_cancelling_the_task_awaiting_ask_async_cancels_the_run(config, script):
    started = threading.Event()
    target = script([{"tool_calls": [{"name": "wait", "arguments": {}}]}, {"text": "never"}])
    Waiting = agent_for(target, _waiting_tool(started))
    seen = []

    async def main():
        task = asyncio.create_task(Waiting.ask_async("Go", on_event=seen.append))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()  # e.g. the web request awaiting it was dropped
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())

    assert seen[-1].type == "run_cancel", "the run stopped with the task that awaited it"


def _gate_tool(started, released, results):
    class GateTool(Tool):
        tool_name = "gate"
        description = "Waits until the test opens the gate."

        def call(self, input):
            started.set()
            results.append("opened" if released.wait(15) else "still shut")
            return results[-1]

    return GateTool


@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", ["ask_async", "stream_ask_async"])
def test_running_async_forms_leave_the_loops_worker_threads_free(config, script, form):
    """A run takes minutes; one per default-executor thread must not starve every ``to_thread``."""
    started, released, results = threading.Event(), threading.Event(), []
    target = script([{"tool_calls": [{"name": "gate", "arguments": {}}]}, {"text": "done"}])
    Gated = agent_for(target, _gate_tool(started, released, results))

    async def consume():
        if form == "ask_async":
            return await Gated.ask_async("Go")
        stream = Gated.stream_ask_async("Go")
        [event async for event in stream]
        return stream.run

    async def main():
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        task = asyncio.create_task(consume())
        while not started.is_set():
            await asyncio.sleep(0.01)
        await asyncio.to_thread(released.set)  # e.g. a store read of another request
        return await task

    run = asyncio.run(main())

    assert run.outcome == "completed"
    assert results == ["opened"], "to_thread ran while the run held its gate"


@pytest.mark.timeout(60)
def test_async_iteration_of_an_embedded_execution_waits_on_the_loop_not_a_thread(config, script, monkeypatch):
    """An idle SSE stream in an embedded web app must not hold one of the loop's few executor threads."""
    from lg_core.engine.background import _RunLog

    def blocking(*args):
        raise AssertionError("async iteration used the blocking read")

    monkeypatch.setattr(_RunLog, "read", blocking)
    started, released, results = threading.Event(), threading.Event(), []
    target = script([{"tool_calls": [{"name": "gate", "arguments": {}}]}, {"text": "done"}])
    execution = agent_for(target, _gate_tool(started, released, results)).start_execution("Go")

    async def follow():
        types = []
        async for event in execution.events():
            types.append(event.type)
            if event.type == "tool_execution_start":
                released.set()  # the reader now waits for the rest
        return types

    types = asyncio.run(follow())

    assert types[0] == "invocation_start" and types[-1] == "run_stop"
    assert "text_delta" in types and results == ["opened"]


@pytest.mark.timeout(60)
def test_wait_async_on_an_embedded_execution_leaves_the_loops_worker_threads_free(config, script):
    started, released, results = threading.Event(), threading.Event(), []
    target = script([{"tool_calls": [{"name": "gate", "arguments": {}}]}, {"text": "done"}])
    execution = agent_for(target, _gate_tool(started, released, results)).start_execution("Go")

    async def main():
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        waiting = asyncio.create_task(execution.wait_async())
        await asyncio.sleep(0)  # the wait begins
        while not started.is_set():
            await asyncio.sleep(0.01)
        await asyncio.to_thread(released.set)  # e.g. a store read of another request
        return await waiting

    run = asyncio.run(main())

    assert run.outcome == "completed"
    assert results == ["opened"], "to_thread ran while wait_async waited for the run"


@pytest.mark.timeout(60)
def test_ask_async_prepares_its_run_off_the_loop(script):
    """Building the run (the runtime and its store on first use, the hooks' prepare_run) may wait on I/O."""
    from lg_core import Configuration, with_configuration
    from lg_core.hooks import Hook

    ticked, saw_the_loop_run = threading.Event(), []

    class OpensAWorkspace(Hook):
        def prepare_run(self, run):
            saw_the_loop_run.append(ticked.wait(30))  # a hook doing I/O
            return run

    async def main():
        asyncio.get_running_loop().call_soon(ticked.set)
        return await agent_for(script(TURNS), LookupTool).ask_async("Refunds and shipping?")

    configuration = Configuration(hooks=[OpensAWorkspace])
    with with_configuration(configuration):
        run = asyncio.run(main())
    configuration.close()

    assert run.outcome == "completed"
    assert saw_the_loop_run == [True], "the loop ran while the run was being prepared"


@pytest.mark.timeout(60)
def test_an_ask_async_cancelled_while_its_run_is_prepared_closes_that_run(script):
    """The build goes on on its thread; the Run it makes never starts, so its resources are closed."""
    from lg_core import Configuration, with_configuration
    from lg_core.hooks import Hook

    preparing, release, closed = threading.Event(), threading.Event(), threading.Event()

    class SlowWorkspace(Hook):
        def prepare_run(self, run):
            run.register(closer=closed.set)
            preparing.set()
            release.wait(30)
            return run

    async def main():
        task = asyncio.create_task(agent_for(script(TURNS), LookupTool).ask_async("Refunds?"))
        await asyncio.to_thread(preparing.wait, 30)
        task.cancel()  # the web request went away while the run was being prepared
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()

    configuration = Configuration(hooks=[SlowWorkspace])
    with with_configuration(configuration):
        asyncio.run(main())
        assert closed.wait(30), "the prepared run's resources were left open"
    configuration.close()


@pytest.mark.timeout(30)
def test_leaving_an_async_stream_early_cancels_the_run_in_the_store_off_the_loop(config, script, monkeypatch):
    started = threading.Event()
    target = script([{"tool_calls": [{"name": "wait", "arguments": {}}]}, {"text": "never"}])
    Waiting = agent_for(target, _waiting_tool(started))
    runtime, cancelled_on = config.runtime(), []
    request_cancel = runtime.cancel

    def cancel(run_id, reason=None):
        cancelled_on.append(threading.get_ident())
        return request_cancel(run_id, reason)

    monkeypatch.setattr(runtime, "cancel", cancel)

    async def main():
        stream = Waiting.stream_ask_async("Go")
        iterator = stream.__aiter__()
        async for event in iterator:
            if event.type == "tool_execution_start":
                break
        await iterator.aclose()
        return stream.run

    loop_thread = threading.get_ident()  # asyncio.run runs the loop on this thread
    run = asyncio.run(main())

    assert run.outcome == "cancelled"
    assert cancelled_on and loop_thread not in cancelled_on, "the store's cancel flag is a database write"


def test_a_scripted_turn_can_pace_its_deltas_like_a_streaming_model(config, script):
    agent = agent_for(script([{"text": "one two three", "delta_delay": 0.05}]))
    started = time.monotonic()
    deltas = [event.data["text"] for event in agent.stream_ask("Go") if event.type == "text_delta"]
    elapsed = time.monotonic() - started
    assert "".join(deltas) == "one two three" and len(deltas) == 3
    assert elapsed >= 0.1  # a lower bound only: two pauses between three deltas, each sleeps at least 50 ms


@pytest.mark.parametrize("bad", [-1, "fast", True])
def test_a_scripted_turn_with_a_bad_delay_fails_the_run_with_a_clear_message(config, script, bad):
    run = agent_for(script(lambda request: {"text": "hi", "delta_delay": bad})).ask("Go")
    assert run.failed
    assert "delta_delay must be a number of seconds >= 0" in str(run.error)


class _AsyncConsumer:
    async def __call__(self, event):
        pass


async def _async_consumer(event):
    pass


@pytest.mark.parametrize("consumer", [_async_consumer, _AsyncConsumer()], ids=["function", "callable object"])
def test_an_async_on_event_is_refused_before_a_run_exists(config, script, consumer):
    """Its coroutine was never awaited: every event was lost, with a RuntimeWarning each."""
    agent = agent_for(script([{"text": "hi"}]))

    with pytest.raises(TypeError, match="on_event is an async function"):
        agent.ask("hi", on_event=consumer)
    assert config.runtime().store.list_runs() == []


def test_an_on_event_returning_a_coroutine_stops_the_run_with_that_error(config, script):
    """A plain function that calls an async one (a lambda) passes the check; its first event stops the run."""
    agent = agent_for(script([{"text": "hi"}]))

    with pytest.raises(TypeError, match="on_event is an async function"):
        agent.ask("hi", on_event=lambda event: _async_consumer(event))
