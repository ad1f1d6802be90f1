"""A Run's life: cancellation, deadlines, owned resources, ``once`` and runtime hooks."""

from __future__ import annotations

import contextvars
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

import lg_core
from lg_core import Agent, CancellationToken, Configuration, Hook, Tool, with_configuration
from lg_core.errors import CancelledError, DeadlineExceededError, InvocationError, ProviderError

# Deadlines that work must beat first (a model turn and a tool call before the deadline
# passes): 2 s, not 0.5 s, which a loaded machine's scheduling can use up on its own
# (the same race failed tests/providers/test_http_conformance.py under load).
RUN_DEADLINE = 2.0


def agent_for(target, *tool_classes, **attributes):
    namespace = {"model": target, "tools": list(tool_classes), **attributes}
    return type("LifecycleAgent", (Agent,), namespace)


def tool_turns(name, then="Done.", **first):
    return [{"tool_calls": [{"name": name, "arguments": {}}], **first}, {"text": then}]


def event_types(run):
    return [event.type for event in run.events()]


def start_thread(function):
    """Run ``function`` on a new thread in the test's configuration (threads do not inherit contextvars)."""
    thread = threading.Thread(target=contextvars.copy_context().run, args=(function,))
    thread.start()
    return thread


# -- cancellation --------------------------------------------------------------------------------


def test_a_tool_cancelling_its_run_ends_it_cancelled(config, script):
    class StopTool(Tool):
        tool_name = "stop"
        description = "Stop the run."

        def call(self, input):
            self.run.cancel("the user closed the chat")
            return "stopping"

    run = agent_for(script(tool_turns("stop")), StopTool).ask("Go")

    assert run.outcome == "cancelled"
    assert run.cancelled and not run.completed
    assert run.response is None
    assert isinstance(run.error, CancelledError)
    assert "the user closed the chat" in str(run.error)
    types = event_types(run)
    assert types[-1] == "run_cancel"
    assert types.count("message_stop") == 1, "no model turn runs after cancellation"
    assert [t for t in types if t in ("run_stop", "run_error", "run_partial", "run_cancel")] == ["run_cancel"]


def _waiting_tool(started):
    class WaitTool(Tool):
        tool_name = "wait"
        description = "Waits until the run is cancelled."

        def call(self, input):
            started.set()
            self.context.cancellation_token.wait(30)
            self.context.check()
            return "was never cancelled"

    return WaitTool


def test_cancelling_the_token_from_another_thread_cancels_the_run(config, script):
    started = threading.Event()
    token = CancellationToken()
    runs = []
    Waiting = agent_for(script(tool_turns("wait")), _waiting_tool(started))
    worker = start_thread(lambda: runs.append(Waiting.ask("Go", cancellation_token=token)))
    assert started.wait(30)
    token.cancel("caller went away")
    worker.join(60)

    assert not worker.is_alive()
    [run] = runs
    assert run.outcome == "cancelled"
    assert run.response is None
    assert "caller went away" in str(run.error)
    assert event_types(run)[-1] == "run_cancel"
    assert "tool_execution_stop" not in event_types(run)


def test_cancel_run_by_id_stops_the_run_at_the_next_step(config, script):
    started, release = threading.Event(), threading.Event()

    class PauseTool(Tool):
        tool_name = "pause"
        description = "Waits for the test."

        def call(self, input):
            started.set()
            assert release.wait(30)
            return "resumed"

    runs = []
    Paused = agent_for(script(tool_turns("pause", then="should not be reached")), PauseTool)
    worker = start_thread(lambda: runs.append(Paused.ask("Go", run_id="cancel-by-id-1")))
    assert started.wait(30)
    assert lg_core.cancel_run("cancel-by-id-1") is True
    release.set()
    worker.join(60)

    [run] = runs
    assert run.outcome == "cancelled"
    assert event_types(run).count("message_stop") == 1
    assert lg_core.cancel_run("cancel-by-id-1") is False, "a finished run cannot be cancelled again"


# -- deadlines -------------------------------------------------------------------------------------


def test_a_deadline_during_a_slow_model_turn_ends_partial_with_the_text_so_far(config, script):
    class NoteTool(Tool):
        tool_name = "note"
        description = "Take a note."

        def call(self, input):
            return "noted"

    turns = [
        {"text": "Let me check the order.", "tool_calls": [{"name": "note", "arguments": {}}]},
        {"text": "Your order shipped.", "delay": RUN_DEADLINE + 0.5},
    ]
    run = agent_for(script(turns), NoteTool).ask("Where is my order?", deadline=RUN_DEADLINE)

    assert run.outcome == "partial"
    assert run.partial
    assert run.response == "Let me check the order."
    assert isinstance(run.error, DeadlineExceededError)
    types = event_types(run)
    assert types[-1] == "run_partial"
    assert run.events()[-1].data["response"] == "Let me check the order."


@pytest.mark.timeout(30)
def test_a_scripted_delay_longer_than_the_deadline_ends_partial_at_the_deadline(config, script):
    """The scripted model waits as an HTTP provider does: the deadline ends the wait, not the delay."""
    run = agent_for(script([{"text": "Far too late.", "delay": 120}])).ask("Where is my order?", deadline=RUN_DEADLINE)

    assert run.outcome == "partial"
    assert isinstance(run.error, DeadlineExceededError)
    assert "message_start" not in event_types(run)
    record = config.runtime().store.load_run(run.id)
    assert record.status == "partial"
    assert record.error["name"] == "DeadlineExceededError"


@pytest.mark.timeout(30)
def test_a_scripted_delay_between_deltas_ends_partial_at_the_deadline_with_the_text_so_far(config, script):
    run = agent_for(script([{"text": "Checking the order now.", "delta_delay": 120}])).ask(
        "Where is my order?", deadline=RUN_DEADLINE
    )

    assert run.outcome == "partial"
    assert run.response == "Checking "
    assert config.runtime().store.load_run(run.id).response == "Checking "


@pytest.mark.timeout(30)
def test_cancelling_during_a_scripted_delay_ends_the_run_cancelled_at_once(config, script):
    waiting = threading.Event()

    def slow_turn(request):
        waiting.set()
        return {"text": "Far too late.", "delay": 120}

    run = agent_for(script(slow_turn)).stream_ask("Where is my order?")
    canceller = start_thread(lambda: waiting.wait(30) and run.cancel("the user left"))
    events = [event.type for event in run]
    canceller.join(30)

    assert run.outcome == "cancelled"
    assert "the user left" in str(run.error)
    assert "message_start" not in events
    assert config.runtime().store.load_run(run.id).status == "cancelled"


def test_deadline_at_text_is_read_when_the_run_starts_and_stored_parsed(config, script):
    run = agent_for(script([{"text": "Shipped."}])).ask("Where is my order?", deadline_at="2999-01-02T03:04:05+02:00")

    assert run.completed, run.error
    record = config.runtime().store.load_run(run.id)
    assert record.deadline_at == datetime(2999, 1, 2, 1, 4, 5, tzinfo=UTC).timestamp()
    assert record.invocation["deadline_at"] == "2999-01-02T01:04:05+00:00"


def test_deadline_at_text_that_is_not_iso_8601_fails_the_request_before_a_run_exists(config, script):
    agent = agent_for(script([{"text": "never"}]))

    with pytest.raises(InvocationError, match="^deadline_at 'end of day' is not ISO 8601 text$"):
        agent.ask("Where is my order?", deadline_at="end of day", run_id="bad-deadline-1")

    assert lg_core.list_runs() == []


def test_a_slow_tool_checking_its_context_ends_partial_at_the_deadline(config, script):
    loops = []

    class CrawlTool(Tool):
        tool_name = "crawl"
        description = "Crawl until told to stop."

        def call(self, input):
            for _ in range(500):
                loops.append(1)
                self.context.check()
                time.sleep(0.02)
            return "crawled everything"

    turns = [
        {"text": "Crawling now.", "tool_calls": [{"name": "crawl", "arguments": {}}]},
        {"text": "never"},
    ]
    run = agent_for(script(turns), CrawlTool).ask("Crawl", deadline=RUN_DEADLINE)

    assert run.outcome == "partial"
    assert run.response == "Crawling now."
    assert isinstance(run.error, DeadlineExceededError)
    assert 1 < len(loops) < 500
    assert event_types(run)[-1] == "run_partial"


def test_a_deadline_already_passed_ends_partial_without_calling_the_model(config, script):
    calls = []

    def serve(request):
        calls.append(request)
        return {"text": "late"}

    run = agent_for(script(serve)).ask("Hi", deadline=0)

    assert run.outcome == "partial"
    assert not run.response
    assert calls == []


# -- owned resources ----------------------------------------------------------------------------------


OUTCOME_SCRIPTS = {
    "completed": [{"text": "fine"}],
    "failed": [{"error": "boom"}],
    "cancelled": tool_turns("stop"),
}


class _StopTool(Tool):
    tool_name = "stop"
    description = "Cancel the run."

    def call(self, input):
        self.run.cancel()
        return "ok"


@pytest.mark.parametrize("outcome", sorted(OUTCOME_SCRIPTS))
def test_registered_resources_close_in_reverse_order_after_every_outcome(config, script, outcome):
    closed = []

    class Resource:
        def __init__(self, name):
            self.name = name

        def close(self):
            closed.append(self.name)

    run = agent_for(script(OUTCOME_SCRIPTS[outcome]), _StopTool).stream_ask("Go")
    first = run.register(Resource("database"))
    run.register(closer=lambda: closed.append("lock"))
    run.register(Resource("tempdir"))
    assert first.name == "database", "register returns the resource"

    events = list(run)

    assert run.outcome == outcome
    assert events[-1].terminal
    assert closed == ["tempdir", "lock", "database"]


def test_register_after_close_raises_and_register_needs_a_closer(config, script):
    run = agent_for(script([{"text": "ok"}])).ask("Hi")

    with pytest.raises(lg_core.Error, match="closed"):
        run.register(closer=lambda: None)
    with pytest.raises(TypeError):
        agent_for(script([{"text": "ok"}])).stream_ask("Hi").register(object())


def test_a_tool_may_register_resources_on_its_run(config, script):
    closed = []

    class OpenTool(Tool):
        tool_name = "open"
        description = "Opens a connection."

        def call(self, input):
            self.run.register(closer=lambda: closed.append("connection"))
            assert closed == [], "resources stay open while the run executes"
            return "opened"

    run = agent_for(script(tool_turns("open")), OpenTool).ask("Go")

    assert run.outcome == "completed"
    assert closed == ["connection"]


def test_a_failing_closer_raises_cleanup_error_after_every_closer_ran(config, script):
    closed, runs = [], []

    class OpenTool(Tool):
        tool_name = "open"
        description = "Opens things."

        def call(self, input):
            runs.append(self.run)
            self.run.register(closer=lambda: closed.append("first"))
            self.run.register(closer=self.explode)
            self.run.register(closer=lambda: closed.append("last"))
            return "opened"

        @staticmethod
        def explode():
            raise OSError("socket already gone")

    with pytest.raises(OSError, match="socket already gone"):  # the first cleanup exception, as the spec says
        agent_for(script(tool_turns("open")), OpenTool).ask("Go")

    assert closed == ["last", "first"]
    [run] = runs
    assert run.outcome == "completed", "the run's own outcome is not rewritten by cleanup"
    assert run.failed and isinstance(run.cleanup_error, OSError)  # failed?: "after execution or cleanup failed"


def test_a_failing_closer_raises_cleanup_error_at_the_end_of_a_stream(config, script):
    run = agent_for(script([{"text": "ok"}])).stream_ask("Hi")
    run.register(closer=lambda: (_ for _ in ()).throw(OSError("disk full")))

    seen = []
    with pytest.raises(OSError, match="disk full"):
        for event in run:
            seen.append(event.type)
    assert seen[-1] == "run_stop"


class AsyncResource:
    async def close(self) -> None:  # never awaited by the run: refused when registered
        raise AssertionError("an async close must not run on a new event loop")


class AsyncCallableCloser:
    async def __call__(self) -> None:
        raise AssertionError("an async closer must not run on a new event loop")


async def async_closer() -> None:
    raise AssertionError("an async closer must not run on a new event loop")


@pytest.mark.parametrize(
    "register",
    [
        lambda run: run.register(AsyncResource()),
        lambda run: run.register(closer=async_closer),
        lambda run: run.register(closer=AsyncCallableCloser()),
    ],
    ids=["resource with an async close", "async closer", "object with an async __call__"],
)
def test_an_async_closer_is_refused_when_registered_not_silently_skipped(config, script, register):
    run = agent_for(script([{"text": "ok"}])).stream_ask("Hi")

    with pytest.raises(TypeError, match="the closer is async.*run_coroutine_threadsafe"):
        register(run)
    run.call()
    assert run.completed and run.cleanup_error is None


def test_a_closer_returning_a_coroutine_fails_cleanup_and_the_other_closers_still_run(config, script, recwarn):
    closed = []
    run = agent_for(script([{"text": "ok"}])).stream_ask("Hi")
    run.register(closer=lambda: closed.append("first"))
    run.register(closer=lambda: AsyncResource().close())
    run.register(closer=lambda: closed.append("last"))

    with pytest.raises(TypeError, match="the closer is async"):
        run.call()

    assert closed == ["last", "first"]
    assert isinstance(run.cleanup_error, TypeError)
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_register_refuses_a_closer_that_is_not_callable(config, script):
    run = agent_for(script([{"text": "ok"}])).stream_ask("Hi")

    with pytest.raises(TypeError, match=r"register\(closer=...\) needs a callable, got str"):
        run.register(closer="close it")


# -- once -----------------------------------------------------------------------------------------


class ChargeTool(Tool):
    tool_name = "charge"
    description = "Charge the card once."
    charges: list = []
    returned: list = []

    def call(self, input):
        value = self.run.once("charge-card", lambda: self.charges.append(self.run.id) or "charged")
        self.returned.append(value)
        return str(value)


class OnceAgent(Agent):
    """Module level so the stored run's entrypoint is importable by get_run."""

    tools = [ChargeTool]

    @classmethod
    def select_model(cls, invocation):
        return invocation["target"]


@pytest.fixture
def charge_log():
    ChargeTool.charges, ChargeTool.returned = [], []
    return ChargeTool


def test_once_runs_its_block_once_per_run_and_persists(file_config, script, charge_log):
    turns = [
        {"tool_calls": [{"name": "charge", "arguments": {}}]},
        {"tool_calls": [{"name": "charge", "arguments": {}}]},
        {"text": "Charged."},
    ]
    target = script(turns)
    run = OnceAgent.ask("Charge me", target=target)

    assert run.outcome == "completed"
    assert charge_log.charges == [run.id]
    assert charge_log.returned == ["charged", None]

    again = []
    assert run.once("charge-card", lambda: again.append(1)) is None
    stored = lg_core.get_run(run.id)
    assert stored is not run
    assert stored.once("charge-card", lambda: again.append(1)) is None
    assert again == []
    assert stored.once("another-key", lambda: "fresh") == "fresh"

    other = OnceAgent.ask("Charge me too", target=script(turns))
    assert charge_log.charges == [run.id, other.id], "once keys are per run"


def test_once_serializes_concurrent_callers(config, script):
    barrier = threading.Barrier(2, timeout=30)
    performed, returned = [], []

    class ParallelCharge(Tool):
        tool_name = "charge"
        description = "Charge concurrently."

        def call(self, input):
            barrier.wait()
            returned.append(self.run.once("charge", lambda: performed.append(1) or "charged"))
            return "ok"

    calls = [{"name": "charge", "id": f"c{i}", "arguments": {}} for i in range(2)]
    run = agent_for(script([{"tool_calls": calls}, {"text": "ok"}]), ParallelCharge).ask("Go")

    assert run.outcome == "completed"
    assert performed == [1]
    assert sorted(returned, key=lambda value: value is None) == ["charged", None]


def test_once_does_not_record_a_block_that_raised(config, script):
    run = agent_for(script([{"text": "ok"}])).ask("Hi")

    def fail():
        raise ValueError("card declined")

    with pytest.raises(ValueError):
        run.once("charge", fail)
    assert run.once("charge", lambda: "second try") == "second try"
    assert run.once("charge", lambda: "third try") is None


@pytest.mark.parametrize(
    ("key", "block", "message"),
    [
        (None, lambda: 1, "non-empty string key, got None"),  # was recorded as "None"
        (5, lambda: 1, "non-empty string key, got 5"),  # was recorded as "5"
        ("", lambda: 1, "non-empty string key, got ''"),
        ("k" * 201, lambda: 1, "at most 200 characters, got 201"),
        ("charge", "not callable", "needs a block to call, got str"),
    ],
)
def test_once_refuses_a_key_that_is_not_a_short_string_and_a_block_that_is_not_callable(
    config, script, key, block, message
):
    run = agent_for(script([{"text": "ok"}])).ask("Hi")
    with pytest.raises(InvocationError, match=message):
        run.once(key, block)
    assert run.once("5", lambda: "the string key is still free") == "the string key is still free"


# -- hooks --------------------------------------------------------------------------------------


class RecordingHook(Hook):
    calls: list = []

    def prepare_run(self, run):
        self.calls.append(("prepare_run", run.id, run.outcome))
        run.register(closer=lambda: self.calls.append(("closed", run.id, run.outcome)))
        return run

    def prepare_execution(self, run):
        self.calls.append(("prepare_execution", run.id, run.outcome))
        return run

    def error_message(self, error, run):
        if isinstance(error, ProviderError):
            return f"Support is busy, reference {run.id[:6]}."
        return None


@pytest.fixture
def hooked_config():
    RecordingHook.calls = []
    configuration = Configuration(hooks=[RecordingHook])
    with with_configuration(configuration):
        yield configuration
    configuration.close()


def test_hooks_prepare_runs_and_executions_in_order(hooked_config, script):
    run = agent_for(script([{"text": "ok"}])).ask("Hi")

    assert run.outcome == "completed"
    assert RecordingHook.calls == [
        ("prepare_run", run.id, None),
        ("prepare_execution", run.id, None),
        ("closed", run.id, "completed"),
    ]


def test_hook_error_message_is_the_caller_safe_message_of_a_failed_run(hooked_config, script):
    run = agent_for(script([{"error": "internal upstream detail"}])).ask("Hi")

    assert run.outcome == "failed"
    terminal = run.events()[-1]
    assert terminal.type == "run_error"
    assert terminal.data["message"] == f"Support is busy, reference {run.id[:6]}."
    assert terminal.data["error_class"] == "ProviderError"


SAFE_PROVIDER_MESSAGE = "ProviderError: the request to the model provider failed."  # the default without a hook


class BrokenMessageHook(Hook):
    def error_message(self, error, run):
        raise RuntimeError("the hook's own bug")


class LaterHook(Hook):
    def error_message(self, error, run):
        return "Support is busy."


@pytest.mark.parametrize(
    ("hooks", "message"),
    [([BrokenMessageHook], SAFE_PROVIDER_MESSAGE), ([BrokenMessageHook, LaterHook], "Support is busy.")],
)
def test_a_hook_whose_error_message_raises_defers_and_the_run_still_ends_failed(script, caplog, hooks, message):
    """Runtime::Hook#error_message returns a message "or nil to defer to later hooks and the
    runtime default"; the Run keeps its failure on ``error`` and the terminal event. A hook
    that raised instead made ``ask`` raise the hook's error with no terminal event, and left
    the run 'running' in the store for ever."""
    configuration = Configuration(hooks=hooks)
    with with_configuration(configuration):
        events = []
        run = agent_for(script([{"error": "upstream detail"}])).ask("Hi", on_event=events.append)
        stored = lg_core.get_run(run.id)
    configuration.close()

    assert run.outcome == "failed" and isinstance(run.error, ProviderError)
    assert stored.outcome == "failed"
    assert events[-1].type == "run_error"
    assert events[-1].data["message"] == message
    assert "BrokenMessageHook.error_message raised RuntimeError" in caplog.text


class DictMessageHook(Hook):
    def error_message(self, error, run):
        return {"internal": "db host 10.0.0.5"}


@pytest.mark.parametrize(
    ("hooks", "message"),
    [([DictMessageHook], SAFE_PROVIDER_MESSAGE), ([DictMessageHook, LaterHook], "Support is busy.")],
)
def test_a_hook_whose_error_message_is_not_a_str_defers_instead_of_showing_it(script, caplog, hooks, message):
    """The hook "returns a caller-safe error message, or nil": str() of anything else could
    show the caller what the hook was written to hide."""
    configuration = Configuration(hooks=hooks)
    with with_configuration(configuration):
        events = []
        run = agent_for(script([{"error": "upstream detail"}])).ask("Hi", on_event=events.append)
    configuration.close()

    assert run.outcome == "failed"
    assert events[-1].data["message"] == message
    assert "DictMessageHook.error_message returned dict, not a str or None" in caplog.text


def test_without_a_hook_an_unexpected_error_gets_a_generic_message(config, script):
    class CrashingAgent(Agent):
        model = script([{"text": "ok"}])

        @lg_core.before_model
        def crash(self, payload):
            raise RuntimeError("internal detail")

    run = CrashingAgent.ask("Hi")

    assert run.outcome == "failed"
    message = run.events()[-1].data["message"]
    assert "RuntimeError" in message
    assert "internal detail" not in message


# -- interrupts in the middle of work ------------------------------------------------------------------


def test_a_deadline_while_text_streams_keeps_the_text_streamed_so_far(config, script):
    deltas = []
    deadline_at = datetime.now(UTC) + timedelta(seconds=RUN_DEADLINE)

    def slow_consumer(event):
        if event.type == "text_delta":
            deltas.append(event.data["text"])
            if len(deltas) == 1:  # the deadline passes while the first delta is being consumed
                time.sleep(max(0.0, (deadline_at - datetime.now(UTC)).total_seconds()) + 0.05)

    target = script([{"text": "Refunds are available within 30 days."}])
    run = agent_for(target).ask("Refunds?", deadline_at=deadline_at, on_event=slow_consumer)

    assert run.outcome == "partial"
    assert deltas == ["Refunds "]
    assert run.response == "Refunds "
    assert run.events()[-1].type == "run_partial"


def test_cancelling_while_text_streams_stops_between_chunks(config, script):
    token = CancellationToken()
    deltas = []

    def cancel_on_first_delta(event):
        if event.type == "text_delta":
            deltas.append(event.data["text"])
            token.cancel("stop button")

    target = script([{"text": "Refunds are available within 30 days."}])
    run = agent_for(target).ask("Refunds?", cancellation_token=token, on_event=cancel_on_first_delta)

    assert run.outcome == "cancelled"
    assert run.response is None
    assert deltas == ["Refunds "]


def _parallel_waiters(started_barrier):
    class WaiterTool(Tool):
        tool_name = "waiter"
        description = "Waits for an interrupt."

        def call(self, input):
            started_barrier.wait()
            for _ in range(500):
                self.context.check()
                if input.get("cancel"):
                    self.run.cancel("first waiter cancels")
                time.sleep(0.02)
            return "never interrupted"

    return WaiterTool


@pytest.mark.parametrize("interrupt", ["cancel", "deadline"])
def test_an_interrupt_during_parallel_tools_ends_the_run_once(config, script, interrupt):
    barrier = threading.Barrier(2, timeout=30)
    calls = [
        {"name": "waiter", "id": "w1", "arguments": {"cancel": interrupt == "cancel"}},
        {"name": "waiter", "id": "w2", "arguments": {}},
    ]
    target = script([{"text": "Working.", "tool_calls": calls}, {"text": "never"}])
    options = {"deadline": RUN_DEADLINE} if interrupt == "deadline" else {}
    run = agent_for(target, _parallel_waiters(barrier)).stream_ask("Go", **options)
    streamed = list(run)

    expected = {"cancel": ("cancelled", "run_cancel"), "deadline": ("partial", "run_partial")}[interrupt]
    assert run.outcome == expected[0]
    terminals = [e.type for e in streamed if e.terminal]
    assert terminals == [expected[1]]
    assert [e.type for e in run.events() if e.terminal] == [expected[1]]
    assert streamed[-1].type == expected[1]
    if interrupt == "deadline":
        assert run.response == "Working."


@pytest.mark.parametrize(
    ("status", "limit"),
    [("complete", 10), ("completed", 0), (None, True), (None, 2**63), pytest.param(None, 10**400, id="None-10**400")],
)
def test_list_runs_refuses_an_unknown_status_or_a_bad_limit(config, status, limit):
    from lg_core import InvocationError, list_runs

    with pytest.raises(InvocationError, match="status must be one of|limit must be"):
        list_runs(status=status, limit=limit)
