"""Which successor a task runs itself (lg_workers.continuation.Chain), and when it stops doing so."""

from __future__ import annotations

import time

import pytest
from celery.worker import state

from lg_core.engine._preclaim import Preclaimed, PreclaimSlot
from lg_core.engine.dispatcher import StepRef
from lg_workers.continuation import Chain, consumed_queues

BOTH = frozenset({"lg.model", "lg.tools"})


def ref(key: str, kind: str) -> StepRef:
    return StepRef("run-1", key, kind, "run-1/root")


MODEL = ref("root/turn-2/model", "model")
TOOL_A = ref("root/turn-1/tool/call_a", "tool")
TOOL_B = ref("root/turn-1/tool/call_b", "tool")


def test_the_first_successor_on_a_consumed_queue_runs_here_and_the_others_are_published():
    chain = Chain(BOTH)
    assert chain.take([TOOL_A, TOOL_B]) == (TOOL_A, [TOOL_B])
    assert chain.steps == 2
    assert Chain(frozenset({"lg.model"})).take([TOOL_A, MODEL]) == (MODEL, [TOOL_A])


def test_nothing_runs_here_when_this_worker_does_not_consume_the_queue():
    chain = Chain(frozenset({"lg.model"}))
    assert chain.take([TOOL_A, TOOL_B]) == (None, [TOOL_A, TOOL_B])
    assert Chain(frozenset()).take([MODEL]) == (None, [MODEL])
    assert chain.steps == 1


def test_a_recovery_ref_is_never_run_inline():
    advance = StepRef("run-1", "root/advance", "advance", "run-1/root")
    assert Chain(frozenset({"lg.orchestrate", *BOTH})).take([advance]) == (None, [advance])


def test_a_chain_stops_after_its_step_limit():
    chain = Chain(BOTH, max_steps=3)
    assert chain.take([MODEL])[0] is MODEL
    assert chain.take([TOOL_A])[0] is TOOL_A
    assert chain.take([MODEL]) == (None, [MODEL])  # the first message has waited unacked long enough


def test_a_chain_stops_after_its_time_limit():
    chain = Chain(BOTH, max_seconds=0.01)
    time.sleep(0.02)
    assert chain.take([MODEL]) == (None, [MODEL])


@pytest.mark.parametrize("flag", ["should_stop", "should_terminate"])
def test_a_chain_stops_when_the_worker_shuts_down(monkeypatch, flag):
    monkeypatch.setattr(state, flag, 0)  # warm shutdown sets the exit code, which may be 0
    assert Chain(BOTH).take([MODEL]) == (None, [MODEL])


def test_outside_a_worker_no_queue_is_consumed():
    class NoWorker:
        @property
        def app(self):
            raise RuntimeError("no app")

    assert consumed_queues(NoWorker()) == frozenset()


def test_a_failed_send_marks_its_connection_broken_and_the_sender_opens_another():
    from celery import Celery

    from lg_workers import continuation

    app = Celery("events-test", broker="memory://", set_as_current=False)
    broken = continuation._TaskEvents(app, "worker@test")

    def refuse(*_args, **_kwargs):
        raise ConnectionError("Redis restarted")

    broken.dispatcher.send = refuse
    broken.send([("task-1", "task-started", {})])  # monitoring only: no exception reaches the step
    assert broken.broken

    sender = continuation._Sender(app, "worker@test")
    sender.events = broken
    sender.put([("task-2", "task-started", {})])
    assert sender.drain(timeout=5)
    assert sender.events is not broken and not sender.events.broken


def test_a_sender_that_cannot_reach_redis_drops_the_batch_and_keeps_going(monkeypatch):
    from celery import Celery

    from lg_workers import continuation

    sent: list = []
    opened = {"count": 0}
    real_init = continuation._TaskEvents.__init__

    def first_fails(self, app, hostname):
        opened["count"] += 1
        if opened["count"] == 1:
            raise ConnectionError("Redis is down")
        real_init(self, app, hostname)

    monkeypatch.setattr(continuation._TaskEvents, "__init__", first_fails)
    monkeypatch.setattr(continuation._TaskEvents, "send", lambda self, events: sent.extend(events))
    sender = continuation._Sender(Celery("down-test", broker="memory://", set_as_current=False), "worker@down")
    sender.put([("task-1", "task-received", {})])
    assert sender.drain(timeout=5)
    sender.put([("task-2", "task-received", {})])
    assert sender.drain(timeout=5)
    assert [task_id for task_id, _event, _fields in sent] == ["task-2"]  # the thread survived the outage


def test_queued_task_events_are_sent_by_the_sender_thread_and_drained_at_shutdown(monkeypatch):
    from celery import Celery

    from lg_workers import continuation

    sent: list = []
    monkeypatch.setattr(continuation._TaskEvents, "send", lambda self, events: sent.extend(events))
    app = Celery("sender-test", broker="memory://", set_as_current=False)
    sender = continuation._sender(app, "worker@sender-test")
    assert continuation._sender(app, "worker@sender-test") is sender
    sender.put([("task-1", "task-received", {"name": "lg.tool_call"})])
    sender.put([("task-1", "task-succeeded", {"result": "'executed'"})])
    continuation.drain_task_events(timeout=5)
    assert [event for _id, event, _fields in sent] == ["task-received", "task-succeeded"]


def test_the_step_a_commit_claimed_is_taken_even_if_the_worker_began_to_stop_since(monkeypatch):
    chain = Chain(BOTH)
    assert chain.pick([TOOL_A, TOOL_B]) == TOOL_A  # the commit claims it for this thread
    monkeypatch.setattr(state, "should_stop", 0)
    # Nobody else would run it before its lease ran out: the chain runs it, then stops.
    assert chain.take([TOOL_A, TOOL_B]) == (TOOL_A, [TOOL_B])
    assert chain.take([MODEL]) == (None, [MODEL])


def test_a_pick_whose_commit_did_not_apply_is_forgotten():
    chain = Chain(BOTH)
    assert chain.pick([TOOL_A]) == TOOL_A
    assert chain.take([]) == (None, [])  # the commit lost a race: nothing was scheduled or claimed
    assert chain.take([MODEL]) == (MODEL, [])  # no stale pick: the ordinary choice, claimed by the task


def test_nothing_is_picked_past_the_chains_bounds():
    chain = Chain(BOTH, max_steps=1)
    assert chain.pick([MODEL]) is None
    assert chain.take([MODEL]) == (None, [MODEL])


def test_a_pre_claim_serves_only_the_threads_very_next_step():
    slot = PreclaimSlot()
    slot.put(Preclaimed(MODEL, None, None, 0.0, False))
    assert slot.take(MODEL.run_id, MODEL.key).ref == MODEL
    assert slot.take(MODEL.run_id, MODEL.key) is None  # once
    slot.put(Preclaimed(TOOL_A, None, None, 0.0, False))
    assert slot.take("run-2", "root/turn-0/model") is None  # another step came first (the chain's task failed)
    assert slot.take(TOOL_A.run_id, TOOL_A.key) is None  # left behind: never used later


def test_task_events_queued_while_the_sender_lingers_leave_in_one_send(monkeypatch):
    from celery import Celery

    from lg_workers import continuation

    sends: list[list] = []
    monkeypatch.setattr(continuation._TaskEvents, "send", lambda self, events: sends.append(list(events)))
    sender = continuation._Sender(
        Celery("linger-test", broker="memory://", set_as_current=False), "worker@linger", linger=2.0
    )
    sender.put([("task-1", "task-received", {})])
    deadline = time.monotonic() + 5
    while not sends and time.monotonic() < deadline:
        time.sleep(0.01)  # the first send goes out at once
    for index in range(2, 6):  # steps that follow within the linger
        sender.put([(f"task-{index}", "task-started", {})])
    time.sleep(0.2)
    assert len(sends) == 1, "the sender sent again before its linger was over"
    assert sender.drain(timeout=5)

    assert [[task_id for task_id, _event, _fields in batch] for batch in sends] == [
        ["task-1"],
        ["task-2", "task-3", "task-4", "task-5"],
    ]


def test_draining_at_shutdown_does_not_wait_for_the_linger(monkeypatch):
    from celery import Celery

    from lg_workers import continuation

    sent: list = []
    monkeypatch.setattr(continuation._TaskEvents, "send", lambda self, events: sent.extend(events))
    sender = continuation._Sender(
        Celery("hurry-test", broker="memory://", set_as_current=False), "worker@hurry", linger=60
    )
    sender.put([("task-1", "task-received", {})])
    sender.put([("task-1", "task-succeeded", {})])
    started = time.monotonic()
    assert sender.drain(timeout=5)
    assert time.monotonic() - started < 5
    assert [event for _id, event, _fields in sent] == ["task-received", "task-succeeded"]


def test_a_child_start_in_a_chain_keeps_the_steps_of_its_queues_and_publishes_the_rest():
    from lg_workers.child_starts import keep_for_chain, kept, take_kept

    published: list[list[StepRef]] = []
    assert keep_for_chain([MODEL, TOOL_A]) == [MODEL, TOOL_A]  # no chain on this thread: all published
    with kept(frozenset({"lg.model"}), published.append):
        assert keep_for_chain([MODEL, TOOL_A]) == [TOOL_A]
        assert take_kept() == [MODEL] and take_kept() == []
        assert keep_for_chain([TOOL_B]) == [TOOL_B]
    assert published == []  # everything kept was taken by the chain


def test_a_kept_child_step_the_chain_did_not_take_is_published_when_the_chain_ends():
    from lg_workers.child_starts import keep_for_chain, kept

    published: list[list[StepRef]] = []
    with pytest.raises(RuntimeError), kept(BOTH, published.append):
        keep_for_chain([MODEL])
        raise RuntimeError("the step that started the child failed")
    assert published == [[MODEL]]
    assert keep_for_chain([MODEL]) == [MODEL]  # the chain is over
