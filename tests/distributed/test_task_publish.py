"""The tasks a commit scheduled go out in one Redis pipeline, task-sent events included.

``CeleryBackend.publish`` sends a step's successor tasks through kombu's
publish batch: the task messages and the ``task-sent`` events Flower reads
leave in one round trip instead of two per task. Against the real
redis-server: the messages must arrive in their queue, and each must still
have its task-sent event.
"""

from __future__ import annotations

import base64
import json
import time

import redis

from lg_core.engine.dispatcher import StepRef


def test_the_tasks_of_one_commit_reach_their_queue_with_their_sent_events(dist):
    backend = dist.config.runtime().backend
    listener = redis.Redis.from_url(dist.redis.url).pubsub()
    listener.psubscribe("*celeryev*")
    assert listener.get_message(timeout=30)["type"] == "psubscribe"
    refs = [StepRef("a-run", f"root/turn-1/tool-{n}", "tool", "a-run/root", "lookup") for n in range(2)]

    backend.publish(refs)

    queued = [json.loads(raw) for raw in redis.Redis.from_url(dist.redis.url).lrange("lg.tools", 0, -1)]
    events = [listener.get_message(timeout=30) for _ in refs]
    listener.close()
    # The arguments are ids only; what Flower shows (argsrepr) adds the tool's name.
    assert sorted(json.loads(base64.b64decode(message["body"]))[0] for message in queued) == sorted(
        [r.run_id, r.key] for r in refs
    )
    assert sorted(message["headers"]["argsrepr"] for message in queued) == sorted(
        f"tool=lookup run=a-run step={r.key}" for r in refs
    )
    # Flower's task-sent events still go out, one per task.
    sent = [json.loads(base64.b64decode(json.loads(event["data"])["body"])) for event in events if event]
    assert sorted(event["uuid"] for event in sent) == sorted(message["headers"]["id"] for message in queued)
    assert {event["type"] for event in sent} == {"task-sent"}


def test_a_fresh_copy_of_a_finished_steps_message_publishes_nothing(dist):
    """The relay's copy of a step that its queue reached late finds the step done: a fresh
    message, not a redelivery, so it must not send the run's scheduled steps again (each of
    those copies would do the same at the next turn, a chain that doubles per fan-out)."""
    import dist_app

    dist.start_workers(queues=("lg.model",), concurrency=1)  # one message at a time, in queue order
    client = redis.Redis.from_url(dist.redis.url)
    first = "root/turn-0/model"

    copied = dist_app.StepAgent.start_execution("go")
    _wait_for_tool_message(client, copied.run_id)  # its first step is done; no tools worker runs
    dist.config.runtime().backend.publish([StepRef(copied.run_id, first, "model", f"{copied.run_id}/root")])
    marker = dist_app.StepAgent.start_execution("go")  # queued behind the copy
    _wait_for_tool_message(client, marker.run_id)

    assert sorted(_tool_messages(client)) == sorted([copied.run_id, marker.run_id])  # no copy
    client.close()


def _tool_messages(client) -> list[str]:
    """The run ids of the messages waiting in lg.tools."""
    return [json.loads(base64.b64decode(json.loads(raw)["body"]))[0][0] for raw in client.lrange("lg.tools", 0, -1)]


def _wait_for_tool_message(client, run_id: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while run_id not in _tool_messages(client):
        assert time.monotonic() < deadline, f"no tool message of run {run_id}"
        time.sleep(0.05)
