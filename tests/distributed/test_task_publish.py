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

import redis

from lg_core.engine.dispatcher import StepRef


def test_the_tasks_of_one_commit_reach_their_queue_with_their_sent_events(dist):
    backend = dist.config.runtime().backend
    listener = redis.Redis.from_url(dist.redis.url).pubsub()
    listener.psubscribe("*celeryev*")
    assert listener.get_message(timeout=5)["type"] == "psubscribe"
    refs = [StepRef("a-run", f"root/turn-1/tool-{n}", "tool", "a-run/root") for n in range(2)]

    backend.publish(refs)

    queued = [json.loads(raw) for raw in redis.Redis.from_url(dist.redis.url).lrange("lg.tools", 0, -1)]
    events = [listener.get_message(timeout=5) for _ in refs]
    listener.close()
    assert sorted(message["headers"]["argsrepr"] for message in queued) == sorted(repr([r.run_id, r.key]) for r in refs)
    # Flower's task-sent events still go out, one per task.
    sent = [json.loads(base64.b64decode(json.loads(event["data"])["body"])) for event in events if event]
    assert sorted(event["uuid"] for event in sent) == sorted(message["headers"]["id"] for message in queued)
    assert {event["type"] for event in sent} == {"task-sent"}
