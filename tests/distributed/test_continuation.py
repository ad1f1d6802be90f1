"""A worker consuming both step queues runs a run's successive steps in one task (lg_workers.continuation)."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from typing import Any

import dist_app

from lg_workers.task_display import parse_display


class TaskEvents(threading.Thread):
    """Celery's task events as Flower receives them, captured while the test runs."""

    def __init__(self, app) -> None:
        super().__init__(name="task-events", daemon=True)
        self.app, self.ready = app, threading.Event()
        self.events: list[dict] = []
        self.receiver: Any = None

    def run(self) -> None:
        with self.app.connection_for_read() as connection:
            self.receiver = self.app.events.Receiver(connection, handlers={"*": self.record})
            self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def record(self, event: dict) -> None:
        self.events.append(event)
        self.ready.set()  # the receiver's queue is bound (a worker heartbeat came through)

    def stop(self) -> None:
        if self.receiver is not None:
            self.receiver.should_stop = True
        self.join(timeout=10)


def test_a_run_on_one_worker_for_both_queues_runs_in_one_task_and_flower_sees_every_step(dist):
    dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=2)
    [steps_worker] = dist.start_workers(queues=("lg.model", "lg.tools"), pool="threads", concurrency=4)
    watcher = TaskEvents(dist.config.runtime().backend.app)
    watcher.start()
    assert watcher.ready.wait(30)

    run = dist_app.StepAgent.start_execution("Record every step.").wait(timeout=60)
    assert run.completed, run.error
    keys = {s.key for s in dist.config.runtime().store.load_steps(run.id)} - {"root/start"}
    assert len(keys) == 2 * dist_app.TURNS + 1

    # Every committed step ran once, and the broker delivered a single message for the whole run.
    assert Counter(n for _tool, n, _key in dist.calls()) == Counter(range(dist_app.TURNS))
    log = steps_worker.log.read_text()
    assert log.count(" received") == 1, log[-3000:]
    assert f"'executed +{len(keys) - 1} inline'" in log
    # Each step after the delivered one was claimed by the commit that scheduled it
    # (lg_core.engine._preclaim): its row was written running, in its first attempt.
    steps = [s for s in dist.config.runtime().store.load_steps(run.id) if s.key in keys - {"root/turn-0/model"}]
    assert steps and all(s.attempts == 1 and s.started_at == s.created_at for s in steps), steps[:2]

    def announced():
        received = {e["uuid"]: e for e in watcher.events if e["type"] == "task-received" and run.id in e["args"]}
        succeeded = {e["uuid"] for e in watcher.events if e["type"] == "task-succeeded"}
        return received if set(received) <= succeeded and len(received) == len(keys) else None

    deadline = time.monotonic() + 30
    while (received := announced()) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    watcher.stop()
    assert received is not None, [e for e in watcher.events if e["type"].startswith("task-")][:5]
    by_key = {parse_display(e["args"])[1]: e for e in received.values()}
    assert set(by_key) == keys
    for key, event in by_key.items():
        assert parse_display(event["args"]) == (run.id, key)  # shown as a delivered task's are
        assert event["name"] == ("lg.tool_call" if "/tool/" in key else "lg.model_turn")
    first = [e for e in received.values() if e.get("parent_id") is None]
    assert len(first) == 1  # the delivered task; every inline step names it as its parent and root
    assert {e["root_id"] for e in received.values() if e.get("parent_id")} == {first[0]["uuid"]}


def test_a_child_run_a_node_starts_continues_on_the_nodes_thread(dist):
    """A Graph node's child run is started from the node's step: on a worker consuming the child's
    queues, its first step runs next in the same chain instead of going through the broker, so the
    whole linear Graph (nodes, children's model turns and tool calls) is one delivered task."""
    import graph_dist_app

    [worker] = dist.start_workers(queues=("lg.orchestrate", "lg.model", "lg.tools"), pool="threads", concurrency=2)
    run = graph_dist_app.LinearTransferGraph.start_execution("Where is transfer 481?").wait(timeout=60)

    assert run.completed, run.error
    assert run.result.text == graph_dist_app.ANSWERS["respond"]
    assert sorted(n for _tool, n, _key in dist.calls()) == [1, 4]  # each node's side effect, once
    children = dist.config.runtime().store.list_child_runs(run.id)
    assert len(children) == 2 and all(child.status == "completed" for child in children)
    log = worker.log.read_text()
    assert log.count(" received") == 1, log[-3000:]


def test_a_worker_asked_to_stop_ends_its_chain_after_the_current_step_and_another_worker_goes_on(dist):
    """A warm shutdown waits for running tasks; a chain stops at its next step instead of running
    the whole run first, and publishes that step for the other workers."""
    dist.start_workers(queues=("lg.orchestrate",), pool="threads", concurrency=2)
    slow = {"DIST_APP_MODEL_DELAY": "0.5"}
    [first] = dist.start_workers(queues=("lg.model", "lg.tools"), pool="threads", concurrency=2, **slow)
    execution = dist_app.HangStepAgent.start_execution("Record every step.")
    store = dist.config.runtime().store

    def finished_steps() -> list:
        return [s for s in store.load_steps(execution.run_id) if s.status == "succeeded" and s.key != "root/start"]

    deadline = time.monotonic() + 60
    while len(finished_steps()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    first.kill(signal.SIGTERM)
    assert first.process.wait(timeout=60) == 0, first.log.read_text()[-3000:]
    [second] = dist.start_workers(queues=("lg.model", "lg.tools"), pool="threads", concurrency=2, **slow)

    run = execution.wait(timeout=60)
    assert run.completed, run.error
    assert Counter(n for _tool, n, _key in dist.calls()) == Counter(range(dist_app.TURNS))
    # The first worker stopped mid-run and sent the next step; the second took it and finished.
    assert "Task lg.model_turn" in second.log.read_text() or "Task lg.tool_call" in second.log.read_text()
