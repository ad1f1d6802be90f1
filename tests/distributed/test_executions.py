"""Execution handles across processes, with real workers, Redis and PostgreSQL.

Runs are enqueued from this process and execute on real `celery worker`
processes; another process (a plain Python subprocess using
``lg_core.get_execution``) streams, cancels or interjects. GateAgent's tool
waits at a gate the test holds (a file), so every "while the run is in the
middle of a step" below is a fact, not a race.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import dist_app
import pytest

from lg_core import Configuration, ExecutionState, Hook, get_execution, with_configuration
from lg_core.errors import (
    AgentInterjectionError,
    ConfigurationError,
    DeadlineExceededError,
    InvocationError,
    RunNotFoundError,
)

READER = r"""
import asyncio, json, sys
import lg_core

run_id, after, mode, stop_at = sys.argv[1], sys.argv[2] or None, sys.argv[3], sys.argv[4]
stop_type, _, stop_count = stop_at.partition(":")
seen = 0

def out(event):
    global seen
    record = {"type": event.type, "seq": event.seq, "id": event.id, "data": dict(event.data)}
    print(json.dumps(record, default=str), flush=True)
    seen += event.type == stop_type
    return stop_type and seen >= int(stop_count or 1)

def sync():
    for event in lg_core.get_execution(run_id).events(after):
        if out(event):
            return

async def main():
    from lg_workers.streams import RedisLiveSource

    def blocking(*args):
        raise AssertionError("async iteration used a blocking Redis read")

    RedisLiveSource.read = RedisLiveSource.covers = blocking  # the async form must use redis.asyncio
    execution = await asyncio.to_thread(lg_core.get_execution, run_id)
    async for event in execution.events(after):
        if out(event):
            return

try:
    asyncio.run(main()) if mode == "async" else sync()
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
"""

CONTROL = r"""
import json, sys
import lg_core

run_id, action, *rest = sys.argv[1:]
try:
    execution = lg_core.get_execution(run_id)
    if action == "cancel":
        execution.cancel()
        print(json.dumps({"ok": True}))
    else:
        print(json.dumps({"seq": execution.interject(rest[0])}))
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""


class Reader:
    """Another process following a run's events; its lines arrive in ``self.lines`` as they are printed."""

    def __init__(self, dist, run_id: str, *, after: str | None = None, mode: str = "sync", stop_at: str = "") -> None:
        argv = [sys.executable, "-c", READER, run_id, after or "", mode, stop_at]
        self.process = subprocess.Popen(argv, env=dist.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stderr is not None
        self.stdout, self.stderr = self.process.stdout, self.process.stderr
        self.lines: list[dict] = []
        self._arrived: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.stdout:
            item = json.loads(line)
            self.lines.append(item)
            self._arrived.put(item)
        self._arrived.put(None)

    def wait_for(self, event_type: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                item = self._arrived.get(timeout=remaining)
            except queue.Empty:
                break
            if item is None:
                raise AssertionError(f"the reader ended before {event_type}: {self.lines[-3:]} {self.stderr.read()}")
            if item.get("type") == event_type:
                return item
        raise AssertionError(f"no {event_type} from the reader in {timeout} s: {self.lines[-3:]}")

    def finish(self, timeout: float = 60) -> list[dict]:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"the reader did not end: {self.lines[-3:]}") from None
        assert self.process.returncode == 0, self.stderr.read()
        assert not any("error" in line for line in self.lines), self.lines[-1]
        return self.lines


def control(dist, run_id: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CONTROL, run_id, *args], env=dist.env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def hold(dist, *gates: int) -> None:
    for n in gates:
        (dist.ready_dir / f"hold-{n}").touch()


def release(dist, n: int) -> None:
    (dist.ready_dir / f"hold-{n}").unlink()


def durable_seqs(lines: list[dict]) -> list[int]:
    return [line["seq"] for line in lines if line["seq"] is not None]


def stored_count(execution) -> int:
    return execution.record().event_seq


@pytest.fixture
def workers(dist):
    """One worker process for every queue (a thread pool: light enough for these tests)."""
    return dist.start_workers(pool="threads", concurrency=8)


def test_events_of_a_run_on_workers_stream_to_other_processes(dist, workers):
    execution = dist_app.StepAgent.start_execution("Record every step.")
    readers = [Reader(dist, execution.run_id, mode=mode) for mode in ("sync", "async")]

    outputs = [reader.finish() for reader in readers]
    run = execution.wait(timeout=60)

    assert run.completed and run.response == "All steps recorded."
    for lines in outputs:
        assert durable_seqs(lines) == list(range(1, stored_count(execution) + 1))
        assert lines[-1]["type"] == "run_stop"
        assert any(line["type"] == "tool_call_delta" for line in lines)  # live-only events come through Redis
        assert len({line["id"] for line in lines}) == len(lines)


def test_a_reader_resuming_from_the_last_event_id_misses_nothing_and_repeats_nothing(dist, workers):
    hold(dist, 1)
    execution = dist_app.GateAgent.start_execution("Pass the gates.")
    first = Reader(dist, execution.run_id, stop_at="tool_execution_start:2")  # stops at the held gate 1
    first_lines = first.finish()
    release(dist, 1)
    second = Reader(dist, execution.run_id, after=first_lines[-1]["id"], mode="async")
    second_lines = second.finish()

    assert execution.wait(timeout=60).completed
    assert first_lines[-1]["type"] == "tool_execution_start" and first_lines[-1]["data"]["input"] == {"n": 1}
    assert durable_seqs(first_lines + second_lines) == list(range(1, stored_count(execution) + 1))
    assert second_lines[0]["type"] != "tool_execution_start"  # the first reader's last event is not repeated
    assert second_lines[-1]["type"] == "run_stop"


def test_cancel_from_another_process_stops_a_tool_in_the_middle_of_its_call(dist, workers):
    hold(dist, 1)
    execution = dist_app.GateAgent.start_execution("Pass the gates.")
    dist.wait_for_hang("gate-1")

    assert control(dist, execution.run_id, "cancel") == {"ok": True}
    run = execution.wait(timeout=60)

    assert run.cancelled
    events = list(execution.events())
    assert events[-1].type == "run_cancel"
    assert [n for tool, n, _key in dist.calls() if tool == "gate"] == [0, 1]  # gate 2 never ran


def test_cancel_from_another_process_ends_a_model_call_waiting_for_its_rate_limit_slot(dist, workers):
    first = dist_app.EchoAgent.start_execution("first", rate_limit="1/min")
    assert first.wait(timeout=60).completed  # it took the connection's slot: the next comes a minute later
    second = dist_app.EchoAgent.start_execution("second", rate_limit="1/min")
    store = dist.config.runtime().store
    deadline = time.monotonic() + 30
    while not any(s.kind == "model" and s.status == "running" for s in store.load_steps(second.run_id)):
        assert time.monotonic() < deadline, "the model turn was never claimed"
        time.sleep(0.05)

    assert control(dist, second.run_id, "cancel") == {"ok": True}
    run = second.wait(timeout=30)

    assert run.cancelled
    assert "message_stop" not in [e.type for e in second.events()]  # the call never reached the model


def test_an_interjection_from_another_process_reaches_the_next_model_turn(dist, workers):
    hold(dist, dist_app.GATES - 1)
    execution = dist_app.GateAgent.start_execution("Pass the gates.")
    dist.wait_for_hang(f"gate-{dist_app.GATES - 1}")

    answer = control(dist, execution.run_id, "interject", "Include the latest ledger entry")
    threading.Timer(0.3, release, args=(dist, dist_app.GATES - 1)).start()
    reply = execution.reply(1, timeout=60)  # waits on the store while the run goes on on workers
    run = execution.wait(timeout=60)

    assert answer == {"seq": 1}
    assert reply.text == "You said: Include the latest ledger entry" and reply.numbers == (1,)
    assert run.completed and run.response == "You said: Include the latest ledger entry"
    types = [e.type for e in execution.events()]
    last_gate = len(types) - 1 - types[::-1].index("tool_execution_stop")
    assert types.index("interjection") > last_gate
    late = control(dist, execution.run_id, "interject", "Too late")
    assert late["error"] == "AgentInterjectionError"


def test_an_accepted_interjection_is_never_dropped_by_a_run_finishing_at_that_moment(dist, workers):
    """Interject while the final answer streams: refused (finished) or read by a next turn, never lost."""
    outcomes = []
    for _ in range(10):
        execution = dist_app.EchoAgent.start_execution("Hello")
        accepted = None
        for event in execution.events():
            if event.type == "text_delta" and accepted is None:
                try:
                    accepted = execution.interject("Late news")
                except AgentInterjectionError:
                    accepted = False
        run = execution.wait(timeout=60)
        if accepted:
            assert run.response == "You said: Late news", run.response
            assert "interjection" in [e.type for e in execution.events()]
        outcomes.append(bool(accepted))
    assert True in outcomes  # the interesting case happened at least once


@pytest.mark.chaos
def test_events_survive_a_redis_wipe_in_the_middle_of_a_run(dist, workers):
    hold(dist, 1, 2)
    execution = dist_app.GateAgent.start_execution("Pass the gates.")
    reader = Reader(dist, execution.run_id)
    before = reader.wait_for("tool_execution_start")  # gate 0, read from the stream before the wipe
    dist.wait_for_hang("gate-1")
    reader.process.send_signal(signal.SIGSTOP)  # the reader falls behind ...
    release(dist, 1)
    dist.wait_for_hang("gate-2")  # ... while gate 1's and turn 2's events go to the stream

    dist.redis.restart(wipe=True)  # and are lost with it: the reader must find them in the store
    reader.process.send_signal(signal.SIGCONT)
    # Celery's consumer gives up when its broker vanishes; a supervisor starts a worker again
    dist.start_workers(pool="threads", concurrency=8)
    release(dist, 2)
    lines = reader.finish(timeout=120)
    run = execution.wait(timeout=60)

    assert run.completed, run.error
    total = stored_count(execution)
    assert durable_seqs(lines) == list(range(1, total + 1))
    assert lines[-1]["type"] == "run_stop"
    # an id from before the wipe still works, though the stream no longer has its position
    resumed = [e.seq for e in execution.events(after=before["id"]) if e.seq is not None]
    assert resumed == list(range(int(before["id"].split("-")[0]) + 1, total + 1))
    assert [e.seq for e in execution.events() if e.seq is not None] == list(range(1, total + 1))


def test_capture_diagnostics_false_keeps_an_errors_message_out_of_the_stream(dist, workers):
    """The live terminal event leaves the worker as stored: without the message (model content)."""
    import redis

    from lg_workers.streams import stream_key

    execution = dist_app.SecretAgent.start_execution("Go")
    run = execution.wait(timeout=60)

    assert run.failed
    raw = redis.Redis.from_url(dist.redis.url).xrange(stream_key(execution.run_id))
    in_redis = [fields for _id, fields in raw if fields[b"type"] == b"run_error"]
    read = [dict(e.data) for e in get_execution(execution.run_id).events() if e.type == "run_error"]
    assert in_redis and read
    assert "123-45-6789" not in repr(in_redis) and "123-45-6789" not in repr(read)
    assert "AuditFailed" in repr(in_redis)  # the error's class still says what failed


def test_on_event_and_async_iteration_in_the_starting_process(dist, workers):
    received = []
    execution = dist_app.StepAgent.start_execution("Record every step.", on_event=received.append)

    async def follow() -> list:
        return [event async for event in execution.events()]

    events = asyncio.run(follow())
    run = asyncio.run(execution.wait_async(timeout=60))

    durable = list(range(1, stored_count(execution) + 1))
    assert run.completed
    assert [e.seq for e in events if e.seq is not None] == durable and events[-1].type == "run_stop"
    assert [e.seq for e in received if e.seq is not None] == durable and received[-1].type == "run_stop"


class ClientConnection:
    """A resource a hook registers on each Run this (web) process builds."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def close(self) -> None:
        self.log.append(self.name)


def _hook_registering(log: list[str]) -> type[Hook]:
    class ClientHook(Hook):
        def prepare_run(self, run):
            run.register(ClientConnection(log, "database"))
            run.register(ClientConnection(log, "tenant client"))
            return run

    return ClientHook


def test_resources_registered_where_a_run_was_started_close_when_it_ends_on_workers(dist, workers):
    """Spec Run: it 'closes those resources after success, failure, a partial response, or
    cancellation', in reverse order; Execution: 'The Run continues to own ... registered
    resources'. On workers, what a hook registered in the starting process was never closed
    (only a run with an on_event consumer was followed here): a leaked connection per run."""
    closed: list[str] = []
    config = Configuration(
        run_store=dist.pg_url, broker_url=dist.redis.url, imports=["dist_app"], hooks=[_hook_registering(closed)]
    )
    try:
        with with_configuration(config):
            execution = dist_app.EchoAgent.start_execution("Where is order 481?")
            run = execution.wait(timeout=60)
            assert run.completed
            assert closed == ["tenant client", "database"]
            assert execution.run is run  # the supervised Run, holding its outcome

            hold(dist, 0)
            cancelled = dist_app.GateAgent.start_execution("Pass the gates.")
            dist.wait_for_hang("gate-0")
            assert cancelled.close(timeout=60).cancelled
            assert closed[2:] == ["tenant client", "database"]
    finally:
        config.close()


def test_an_execution_on_workers_still_closing_its_run_here_is_active_not_finished(dist, workers):
    """Spec Execution#finished?: 'the Execution and all interjection calls have finished'. The
    run's record said finished while this process was still closing what was registered on the
    run here, and the handle said finished too."""
    closing, release = threading.Event(), threading.Event()
    run = dist_app.EchoAgent.build_run("Where is order 481?")
    run.register(closer=lambda: (closing.set(), release.wait(60)))
    execution = dist.config.runtime().start_execution(run)
    try:
        assert closing.wait(60) and execution.record().finished
        assert (execution.finished, execution.active, execution.state) == (False, True, "running")
        assert execution.run is run
    finally:
        release.set()
    assert execution.wait(timeout=60) is run and run.completed
    assert (execution.finished, execution.active, execution.state) == (True, False, "finished")


def test_reading_events_from_one_event_loop_after_another_leaves_no_redis_connection_open(dist, workers):
    """A CLI or a sync app may asyncio.run each read: a loop's Redis connection must end with its reading."""
    import redis

    execution = dist_app.StepAgent.start_execution("Record every step.")
    execution.wait(timeout=60)
    server = redis.Redis.from_url(dist.redis.url)

    def readers() -> int:
        return sum(client["cmd"] in ("xread", "xinfo|stream") for client in server.client_list())

    async def follow() -> list:
        return [event.type async for event in execution.events()]

    # wait() read the stream on this process's blocking client, whose pooled connection stays open
    blocking_readers = readers()
    assert blocking_readers <= 1
    for _ in range(5):
        assert asyncio.run(follow())[-1] == "run_stop"

    assert readers() == blocking_readers
    server.close()


def test_a_failing_on_event_consumer_cancels_the_run_and_wait_raises_its_error(dist, workers):
    hold(dist, 0)

    def consumer(event):
        if event.type == "tool_execution_start":
            raise RuntimeError("the consumer broke")

    execution = dist_app.GateAgent.start_execution("Pass the gates.", on_event=consumer)

    with pytest.raises(RuntimeError, match="the consumer broke"):
        execution.wait(timeout=60)
    assert execution.record().status == "cancelled"
    assert isinstance(execution.error, RuntimeError)


def test_bad_inputs_raise_the_spec_errors(dist, workers):
    with pytest.raises(RunNotFoundError):
        get_execution("no-such-run")
    with pytest.raises(InvocationError, match="run id"):
        get_execution(None)
    hold(dist, 0)
    execution = dist_app.GateAgent.start_execution("Pass the gates.")
    dist.wait_for_hang("gate-0")

    for bad in ("garbage", "1-x", "-3", "1-2-3-4"):
        with pytest.raises(InvocationError, match="event id"):
            execution.events(after=bad)
    with pytest.raises(InvocationError, match="ahead of run"):
        next(iter(execution.events(after="999-0")))
    with pytest.raises(InvocationError, match="non-empty user message"):
        execution.interject({"role": "assistant", "content": "I decide"})
    with pytest.raises(InvocationError, match="non-empty user message"):
        execution.interject("")
    with pytest.raises(InvocationError, match="unknown interjection options"):
        execution.interject("hello", priority="high")
    for timeout in (-1, "soon", True):
        with pytest.raises(InvocationError, match="timeout"):
            execution.wait(timeout=timeout)
    with pytest.raises(InvocationError, match="deadline"):
        execution.wait(deadline=datetime.now())  # naive: ambiguous
    with pytest.raises(DeadlineExceededError):
        execution.wait(timeout=0.2)
    with pytest.raises(DeadlineExceededError):
        execution.wait(deadline=datetime.now(UTC) + timedelta(seconds=0.2))
    assert execution.state == "running"  # a wait timeout does not cancel the run

    assert execution.interject({"message": "Also check the ledger", "metadata": {"source": "test"}}) == 1
    release(dist, 0)
    assert execution.wait(timeout=60).completed
    with pytest.raises(AgentInterjectionError):
        execution.interject("Too late")
    assert execution.close() is not None  # idempotent on a finished run


def test_an_agent_no_worker_can_import_is_refused_before_its_run_exists(dist):
    """Workers load a run's agent by its import path: one defined in a function or in the script
    run as __main__ is refused at start, rather than stored and enqueued to stay 'running' while
    every worker fails to import it and the scheduler sends its step again each lease."""

    class LocalAgent(dist_app.EchoAgent):
        pass

    ScriptAgent = type("ScriptAgent", (dist_app.EchoAgent,), {"__module__": "__main__"})  # noqa: N806 - as a script defines it
    for agent, where in ((LocalAgent, "inside a function"), (ScriptAgent, "in __main__")):
        with pytest.raises(ConfigurationError, match=f"is defined {where}.*importable module.*lg worker --import"):
            agent.start_execution("Hello", run_id=f"never-{agent.__name__}")
        with pytest.raises(RunNotFoundError):
            get_execution(f"never-{agent.__name__}")
    assert dist_app.EchoAgent.start_execution("Hello").run_id  # a module-level agent still starts


def test_a_broker_with_the_default_in_memory_store_is_refused_before_its_run_exists(dist):
    """LG_BROKER_URL set but LG_RUN_STORE forgotten: the run went into this process's in-memory
    store and onto the queue, every worker that took its step found no such run and dropped it,
    and the execution stayed 'running' forever with nothing in any log."""
    config = Configuration(run_store="sqlite://", broker_url=dist.redis.url)  # the default store
    with with_configuration(config):
        with pytest.raises(ConfigurationError, match="in-memory.*LG_RUN_STORE.*unset broker_url"):
            dist_app.EchoAgent.start_execution("Hello", run_id="never-in-memory")
        with pytest.raises(RunNotFoundError):
            get_execution("never-in-memory")
    config.close()
    assert dist_app.EchoAgent.start_execution("Hello").run_id  # with the shared store it starts


def test_a_worker_says_so_when_a_run_it_is_sent_is_not_in_its_store(dist, workers, tmp_path):
    """A web process on another store (a relative SQLite path, another database) enqueued runs
    the workers silently dropped: the run stayed 'running' and no log said why."""
    config = Configuration(run_store=f"sqlite:///{tmp_path / 'elsewhere.db'}", broker_url=dist.redis.url)
    with with_configuration(config):
        run_id = dist_app.EchoAgent.start_execution("Hello").run_id
    config.close()
    expected = f"names run {run_id}, which is not in this worker's run store"
    deadline = time.monotonic() + 60
    while not any(expected in worker.log.read_text() for worker in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    logs = "".join(worker.log.read_text() for worker in workers)
    assert expected in logs and "the same LG_RUN_STORE" in logs


def test_the_execution_state_of_the_starting_request_reaches_the_workers(dist, workers):
    """ExecutionState travels with the run (as JSON) to the worker processes that execute its steps."""
    with ExecutionState.with_({"request_id": "req-481"}):
        execution = dist_app.RequestIdAgent.start_execution("Which request is this?")
    run = execution.wait(timeout=60)
    assert run.completed and run.response.startswith("request=req-481 pid=")
    assert int(run.response.split("pid=")[1]) != os.getpid()  # seen by the tool on a worker

    with ExecutionState.with_({"span": object()}), pytest.raises(InvocationError, match="as JSON"):
        dist_app.RequestIdAgent.start_execution("Which request is this?", run_id="never-state")
    with pytest.raises(RunNotFoundError):
        get_execution("never-state")


def test_close_cancels_and_refuses_interjections(dist, workers):
    hold(dist, 0)
    execution = dist_app.GateAgent.start_execution("Pass the gates.")
    dist.wait_for_hang("gate-0")

    run = execution.close(timeout=60)

    assert run.cancelled
    with pytest.raises(AgentInterjectionError):
        execution.interject("after close")


def test_a_retried_start_request_reattaches_to_the_run_it_started(dist, workers):
    """A web request retried with its idempotency key as run_id gets the first try's run, on workers too."""
    first = dist_app.EchoAgent.start_execution("Where is order 481?", run_id="idem-481", actor_id="user-7")
    again = dist_app.EchoAgent.start_execution("Where is order 481?", run_id="idem-481", actor_id="user-7")
    assert again.run_id == first.run_id
    assert again.wait(timeout=60).response == first.wait(timeout=60).response == "You said: Where is order 481?"
    with pytest.raises(InvocationError, match="already exists"):
        dist_app.EchoAgent.start_execution("Where is order 482?", run_id="idem-481", actor_id="user-7")
