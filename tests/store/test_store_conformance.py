"""One conformance suite for every run-store backend: SQLite in memory,
SQLite file, and a real PostgreSQL server (one interface,
several backends, one shared suite)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lg_core import (
    Agent,
    AgentInterjectionError,
    Configuration,
    InvocationError,
    Tool,
    with_configuration,
)
from lg_core.errors import RunNotFoundError
from lg_core.messages import Message
from lg_core.store import NewStep, RunFinish, RunStore, StepCommit


@pytest.fixture(params=["memory", "file", "postgres"])
def store_url(request, tmp_path) -> str:
    if request.param == "memory":
        return "sqlite://"
    if request.param == "file":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(store_url):
    store = RunStore(store_url)
    yield store
    store.close()


def _create(store: RunStore, run_id: str = "r1", steps=("root/turn-0/model",)) -> None:
    store.create_run(
        {
            "id": run_id,
            "entrypoint": "app:Agent",
            "kind": "agent",
            "status": "running",
            "invocation": {"message": "hi"},
            "session_id": run_id,
            "actor_id": None,
            "holder": None,
            "deadline_at": None,
        },
        {
            "id": f"{run_id}/root",
            "run_id": run_id,
            "path": "root",
            "kind": "agent",
            "entrypoint": "app:Agent",
            "version": 0,
            "checkpoint": {"turn": 0},
        },
        [(0, Message(role="user", content="hi"))],
        [("invocation_start", {"run_id": run_id})],
        [NewStep(key=k, frame_id=f"{run_id}/root", kind="model") for k in steps],
    )


def _commit(run_id="r1", version=0, key="root/turn-0/model", events=2, finish=None, new=()) -> StepCommit:
    return StepCommit(
        run_id=run_id,
        frame_id=f"{run_id}/root",
        expected_version=version,
        checkpoint={"turn": version + 1},
        step_key=key,
        step_result={"ok": True},
        messages=[(1 + version, Message(role="assistant", content=f"turn {version}"))],
        events=[("usage", {"n": i}) for i in range(events)],
        new_steps=[NewStep(key=k, frame_id=f"{run_id}/root", kind="tool", input={"id": k}) for k in new],
        finish=finish,
    )


def test_create_and_load_round_trip(store):
    _create(store)
    record = store.load_run("r1")
    assert (record.status, record.invocation, record.event_seq, record.finished) == (
        "running",
        {"message": "hi"},
        1,
        False,
    )
    frame = store.load_frame("r1/root")
    assert (frame.version, frame.checkpoint) == (0, {"turn": 0})
    assert store.load_messages("r1/root")[0]["role"] == "user"
    steps = store.load_steps("r1")
    assert [(s.key, s.status) for s in steps] == [("root/start", "succeeded"), ("root/turn-0/model", "scheduled")]
    assert steps[0].checkpoint == {"turn": 0} and steps[0].event_seq == 1
    assert steps[1].scheduled_by == "root/start"
    assert [e.type for e in store.load_events("r1")] == ["invocation_start"]


def test_duplicate_run_id_is_an_invocation_error(store):
    _create(store)
    with pytest.raises(InvocationError, match="already exists"):
        _create(store)


def test_commit_applies_everything_at_once(store):
    _create(store)
    result = store.commit(_commit(new=["root/turn-0/tool/a", "root/turn-0/tool/b_c"]))
    assert result.applied and result.first_seq == 2
    assert store.load_frame("r1/root").version == 1
    assert len(store.load_messages("r1/root")) == 2
    assert [e.seq for e in store.load_events("r1")] == [1, 2, 3]
    steps = {s.key: s for s in store.load_steps("r1")}
    assert steps["root/turn-0/model"].status == "succeeded" and steps["root/turn-0/model"].result == {"ok": True}
    assert steps["root/turn-0/model"].checkpoint == {"turn": 1} and steps["root/turn-0/model"].event_seq == 3
    assert steps["root/turn-0/tool/a"].scheduled_by == "root/turn-0/model"
    assert steps["root/turn-0/tool/b_c"].input == {"id": "root/turn-0/tool/b_c"}
    assert [s.key for s in store.load_steps("r1", prefix="root/turn-0/tool/")] == [
        "root/turn-0/tool/a",
        "root/turn-0/tool/b_c",
    ]
    assert store.load_steps("r1", prefix="root/turn-0/tool/b_")[0].key == "root/turn-0/tool/b_c"


def test_a_lost_race_writes_nothing(store):
    _create(store, steps=("root/turn-0/model", "root/x"))
    assert store.commit(_commit()).applied
    stale = store.commit(_commit(key="root/x", version=0))
    assert (stale.applied, stale.reason) == (False, "frame_version_conflict")
    again = store.commit(_commit(version=1))
    assert (again.applied, again.reason) == (False, "step_already_completed")
    assert len(store.load_events("r1")) == 3
    assert len(store.load_messages("r1/root")) == 2
    assert store.load_run("r1").event_seq == 3


def test_a_statement_failing_late_in_a_commit_rolls_back_all_of_it(store):
    """On PostgreSQL the inserts go out with COMMIT (pipelined): an error there must undo the whole step."""
    _create(store)
    broken = _commit(new=["root/turn-0/tool/a"])
    broken.new_steps = [NewStep(key="root/turn-0/tool/a", frame_id=None, kind="tool")]  # NOT NULL violated
    with pytest.raises(Exception, match="(?i)null"):
        store.commit(broken)

    assert store.load_frame("r1/root").version == 0
    assert store.load_run("r1").event_seq == 1 and len(store.load_events("r1")) == 1
    assert len(store.load_messages("r1/root")) == 1
    assert [(s.key, s.status) for s in store.load_steps("r1", open_only=True)] == [("root/turn-0/model", "scheduled")]
    assert store.commit(_commit(new=["root/turn-0/tool/a"])).applied  # the connection is usable again


def test_a_finishing_commit_waits_for_an_interjection_that_arrived_meanwhile(store):
    """The check runs in the database (a guard on PostgreSQL): nothing of the step is written."""
    _create(store)
    store.add_interjection("r1", {"role": "user", "content": "one more thing"})
    finish = RunFinish("completed", "done", None, None, None)

    refused = store.commit(_commit(finish=finish))

    assert (refused.applied, refused.reason) == (False, "interjection_pending")
    assert store.load_run("r1").status == "running" and store.load_frame("r1/root").version == 0
    consumed = _commit(finish=finish)
    consumed.consumed_interjections = [1]
    result = store.commit(consumed)
    assert result.applied and result.interjections_pending == 0
    assert store.load_run("r1").status == "completed" and store.pending_interjections("r1") == []


def test_an_interjection_is_consumed_by_one_commit_only(store):
    _create(store, steps=("root/turn-0/model", "root/x"))
    store.add_interjection("r1", {"role": "user", "content": "hello"})
    first = _commit()
    first.consumed_interjections = [1]
    assert store.commit(first).applied
    second = _commit(key="root/x", version=1)
    second.consumed_interjections = [1]

    result = store.commit(second)

    assert (result.applied, result.reason) == (False, "interjection_already_consumed")
    assert store.load_frame("r1/root").version == 1 and store.load_run("r1").event_seq == 3


def test_a_commits_events_are_numbered_after_every_earlier_one(store):
    _create(store, steps=("root/turn-0/model", "root/x"))
    assert store.commit(_commit(events=3)).first_seq == 2
    result = store.commit(_commit(key="root/x", version=1, events=2))

    assert result.first_seq == 5
    assert [(e.seq, e.data) for e in store.load_events("r1")][1:] == [
        (2, {"n": 0}),
        (3, {"n": 1}),
        (4, {"n": 2}),
        (5, {"n": 0}),
        (6, {"n": 1}),
    ]
    assert {s.key: s.event_seq for s in store.load_steps("r1")}["root/x"] == 6


def test_a_commit_with_many_rows_stores_each_of_them_once_in_order(store):
    """Messages, events and scheduled steps of one commit, well past a handful of each."""
    _create(store)
    commit = _commit(events=0, new=[f"root/turn-0/tool/t{i:03}" for i in range(3)])
    commit.events = [("usage", {"n": i}) for i in range(150)]
    commit.messages = [(1 + i, Message(role="assistant", content=f"part {i}")) for i in range(101)]

    assert store.commit(commit).applied

    assert [e.data["n"] for e in store.load_events("r1")[1:]] == list(range(150))
    assert [e.seq for e in store.load_events("r1")] == list(range(1, 152))
    assert [m["content"][0]["text"] for m in store.load_messages("r1/root")[1:]] == [f"part {i}" for i in range(101)]
    tools = store.load_steps("r1", prefix="root/turn-0/tool/")
    assert [(s.key, s.status, s.input) for s in tools] == [
        (f"root/turn-0/tool/t{i:03}", "scheduled", {"id": f"root/turn-0/tool/t{i:03}"}) for i in range(3)
    ]


# Characters that SQL, JSON and PostgreSQL's array and text formats quote or escape, the word NULL,
# an empty string and text outside ASCII.
AWKWARD_TEXTS = ('{"a": [1, 2]}', 'back\\slash "quoted", comma', "NULL", "", "line\nbreak\ttab", "ünïcødé ✓ 🎉")


def test_text_with_quotes_braces_and_null_words_reaches_the_store_unchanged(store):
    _create(store)
    commit = _commit(events=0, new=[f"root/turn-0/tool/{i}" for i in range(len(AWKWARD_TEXTS))])
    commit.events = [("note", {"text": text}) for text in AWKWARD_TEXTS]
    commit.messages = [(1 + i, Message(role="assistant", content=text or " ")) for i, text in enumerate(AWKWARD_TEXTS)]
    commit.new_steps = [
        NewStep(key=f"root/turn-0/tool/{i}", frame_id="r1/root", kind="tool", input={"text": text})
        for i, text in enumerate(AWKWARD_TEXTS)
    ]
    commit.new_steps.append(NewStep(key="root/turn-0/tool/none", frame_id="r1/root", kind="tool", input=None))

    assert store.commit(commit).applied

    assert [e.data["text"] for e in store.load_events("r1")[1:]] == list(AWKWARD_TEXTS)
    assert [m["content"][0]["text"] for m in store.load_messages("r1/root")[1:]] == [t or " " for t in AWKWARD_TEXTS]
    inputs = {s.key: s.input for s in store.load_steps("r1", prefix="root/turn-0/tool/")}
    assert inputs == {
        **{f"root/turn-0/tool/{i}": {"text": t} for i, t in enumerate(AWKWARD_TEXTS)},
        "root/turn-0/tool/none": None,
    }


def test_a_commit_with_no_message_and_no_event_still_finishes_its_step(store):
    _create(store)
    commit = _commit(events=0)
    commit.messages = []
    result = store.commit(commit)
    assert result.applied and result.first_seq == 2  # the next event's number: none was added
    assert store.load_step("r1", "root/turn-0/model").event_seq == 1
    assert store.load_frame("r1/root").version == 1 and len(store.load_messages("r1/root")) == 1


def test_a_finished_run_accepts_no_more_commits(store):
    _create(store, steps=("root/turn-0/model", "root/x"))
    finish = RunFinish("completed", "done", None, {"input_tokens": 1}, {"stop_reason": "end_turn"})
    assert store.commit(_commit(finish=finish)).applied
    record = store.load_run("r1")
    assert (record.status, record.response, record.usage, record.finished_at is not None) == (
        "completed",
        "done",
        {"input_tokens": 1},
        True,
    )
    late = store.commit(_commit(key="root/x", version=1))
    assert (late.applied, late.reason) == (False, "run_not_running")
    assert store.list_runs(status="completed")[0].id == "r1"
    assert store.list_runs(status="running") == []


def test_claims_leases_and_takeover(store):
    _create(store)
    key = "root/turn-0/model"
    assert store.claim_step("r1", key, "host:1:1", lease_seconds=30) == 1
    assert store.claim_step("r1", key, "host:2:1", lease_seconds=30) is None  # live lease
    assert store.claim_step("r1", key, "host:2:1", 30, stale_holder="host:1:1") == 2  # dead holder
    assert store.load_step("r1", key).holder == "host:2:1"
    assert store.claim_step("r1", key, "host:2:1", 0.0, stale_holder="host:2:1") == 3  # lease ends now
    time.sleep(0.02)
    assert store.claim_step("r1", key, "host:4:1", lease_seconds=30) == 4  # expired lease
    held = _commit()
    held.holder = "host:2:1"
    assert store.commit(held).reason == "step_already_completed"  # no longer the holder
    held.holder = "host:4:1"
    assert store.commit(held).applied


def test_claim_and_load_claims_and_reads_the_frame_in_one_call(store):
    _create(store)
    store.commit(_commit())  # messages 0 (input) and 1; frame version 1
    store.commit(_commit(key=None, version=1))  # message 2; frame version 2
    store.commit(_commit(key=None, version=2, new=["root/turn-1/tool/t"]))
    store.add_interjection("r1", {"role": "user", "content": "also"})
    store.request_cancel("r1")
    seen: list[str] = []

    def known(frame_id: str) -> int:
        seen.append(frame_id)
        return 2

    start = store.claim_and_load(
        "r1", "root/turn-1/tool/t", "host:1:1", 30, known_messages=known, frame_guess="r1/root"
    )
    assert seen == ["r1/root"]
    assert (start.attempts, start.step.status, start.step.holder, start.step.input) == (
        1,
        "running",
        "host:1:1",
        {"id": "root/turn-1/tool/t"},
    )
    assert (start.run_status, start.cancel_requested, start.interjections_pending) == ("running", True, 1)
    assert (start.frame.id, start.frame.run_id, start.frame.version, start.frame.checkpoint) == (
        "r1/root",
        "r1",
        3,
        {"turn": 3},
    )
    assert (start.frame.path, start.frame.kind, start.frame.entrypoint) == ("root", "agent", "app:Agent")
    assert (start.messages_from, [Message.from_dict(m).text for m in start.messages]) == (2, ["turn 1", "turn 2"])
    assert store.load_step("r1", "root/turn-1/tool/t").holder == "host:1:1"


def test_claim_and_load_reads_the_whole_history_of_a_frame_it_did_not_guess(store):
    _create(store)
    store.commit(_commit())  # messages 0 (input) and 1
    store.commit(_commit(key=None, version=1, new=["root/turn-1/tool/t"]))  # message 2

    start = store.claim_and_load(
        "r1", "root/turn-1/tool/t", "host:1:1", 30, known_messages=lambda _f: 2, frame_guess="r1/other"
    )

    assert (start.frame.id, start.messages_from) == ("r1/root", 0)
    assert [Message.from_dict(m).text for m in start.messages] == ["hi", "turn 0", "turn 1"]


def test_claim_and_load_with_run_brings_the_runs_row_in_the_same_transaction(store):
    _create(store, steps=("root/a", "root/b"))
    store.request_cancel("r1")
    start = store.claim_and_load("r1", "root/a", "host:1:1", 30, with_run=True)
    assert start.attempts == 1 and start.run == store.load_run("r1")
    assert (start.run.status, start.run.cancel_requested, start.run.invocation) == ("running", True, {"message": "hi"})
    assert store.claim_and_load("r1", "root/b", "host:1:1", 30).run is None  # not asked for
    held = store.claim_and_load("r1", "root/a", "host:2:1", 30, with_run=True)
    assert (held.attempts, held.run) == (None, None)  # nothing claimed: the caller does not start the step


def test_claim_and_load_follows_the_claim_rules(store):
    _create(store, steps=("root/a", "root/b"))
    key = "root/a"
    assert store.claim_and_load("r1", key, "host:1:1", 30).attempts == 1
    held = store.claim_and_load("r1", key, "host:2:1", 30)  # a live lease: nothing claimed, nothing changed
    assert (held.attempts, held.frame, held.step.status, held.step.holder, held.run_status) == (
        None,
        None,
        "running",
        "host:1:1",
        "running",
    )
    taken = store.claim_and_load("r1", key, "host:2:1", 30, stale_holder="host:1:1")  # its holder died
    assert (taken.attempts, taken.step.holder, taken.frame.version) == (2, "host:2:1", 0)
    assert [Message.from_dict(m).text for m in taken.messages] == ["hi"]  # nothing cached: the whole conversation
    assert store.claim_and_load("r1", "root/nope", "host:2:1", 30).step is None
    assert store.commit(_commit(key=key)).applied
    done = store.claim_and_load("r1", key, "host:3:1", 30)
    assert (done.attempts, done.step.status, done.run_status) == (None, "succeeded", "running")


def test_claim_and_load_claims_nothing_of_a_finished_run(store):
    _create(store, steps=("root/turn-0/model", "root/x"))
    assert store.commit(_commit(finish=RunFinish("completed", "done", None, {}, None))).applied
    late = store.claim_and_load("r1", "root/x", "host:1:1", 30)
    # (closed by the finishing commit, which no step of the run outlives)
    assert (late.attempts, late.run_status, late.step.status) == (None, "completed", "cancelled")
    assert store.load_step("r1", "root/x").attempts == 0


def test_cancel_request_reaches_the_next_commit(store):
    _create(store)
    assert store.request_cancel("r1")
    assert store.commit(_commit()).cancel_requested


def test_concurrent_event_appends_stay_gapless(store):
    _create(store)
    errors: list[BaseException] = []

    def append() -> None:
        try:
            for _ in range(20):
                store.append_events("r1", [("run_resumed", {}), ("run_resumed", {})])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=append) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [e.seq for e in store.load_events("r1")] == list(range(1, 1 + 1 + 4 * 20 * 2))


def test_concurrent_commits_on_one_frame_allow_one_winner_per_version(store):
    _create(store, steps=tuple(f"root/s{i}" for i in range(6)))
    outcomes: list[str] = []
    barrier = threading.Barrier(6)

    def commit(i: int) -> None:
        barrier.wait()
        outcomes.append(store.commit(_commit(key=f"root/s{i}", version=0)).reason or "applied")

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["applied"] + ["frame_version_conflict"] * 5
    assert store.load_frame("r1/root").version == 1


def test_a_once_claim_is_held_then_done_or_dropped(store):
    _create(store)
    assert store.claim_once("r1", "once/email", "host:1:1", 15).state == "claimed"
    held = store.claim_once("r1", "once/email", "host:2:2", 15)
    assert (held.state, held.holder) == ("held", "host:1:1") and held.lease_until > time.time()
    assert not store.finish_once("r1", "once/email", "host:2:2")  # only the holder settles its claim
    assert store.finish_once("r1", "once/email", "host:1:1")
    assert store.claim_once("r1", "once/email", "host:2:2", 15).state == "done"
    assert store.load_step("r1", "once/email").status == "succeeded"

    assert store.claim_once("r1", "once/sms", "host:1:1", 15).state == "claimed"
    assert store.drop_once("r1", "once/sms", "host:1:1")  # the block raised: the key is free again
    assert store.claim_once("r1", "once/sms", "host:2:2", 15).state == "claimed"
    assert [s.key for s in store.load_steps("r1", open_only=True)] == ["root/turn-0/model"]  # not an open step


def test_concurrent_once_claims_have_one_winner(store):
    _create(store)
    results: list[str] = []

    def claim(i: int) -> None:
        results.append(store.claim_once("r1", "once/charge", f"host:{i}:1", 15).state)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["claimed"] + ["held"] * 5


class _AddTool(Tool):
    description = "Add two numbers."
    input_schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }

    def call(self, input):
        return input["a"] + input["b"]


def test_a_whole_agent_run_on_each_backend(store_url, script):
    target = script(
        [
            {
                "tool_calls": [
                    {"name": "_add", "arguments": {"a": 2, "b": 3}},
                    {"name": "_add", "arguments": {"a": 1, "b": 1}},
                ]
            },
            {"text": "5 and 2"},
        ]
    )

    class AddAgent(Agent):
        model = target
        tools = [_AddTool]

    config = Configuration(run_store=store_url)
    with with_configuration(config):
        run = AddAgent.ask("add")
        assert run.completed, run.error
        stored = config.runtime().get_run(run.id)
        assert stored.outcome == "completed" and stored.response == "5 and 2"
        assert [m.role for m in stored.result.messages] == ["user", "assistant", "tool", "assistant"]
        assert [b.text for b in stored.result.messages[2].tool_results] == ["5", "2"]
        events = stored.events()
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
    config.close()


def test_an_interjection_id_adds_its_message_once(store):
    """A retried request with the same id gets the first number back, even after the run ended."""
    _create(store)
    message = {"role": "user", "content": "one more thing"}

    first = store.add_interjection("r1", message, interjection_id="req-1")
    again = store.add_interjection("r1", dict(message), interjection_id="req-1")
    other = store.add_interjection("r1", message, interjection_id="req-2")
    plain = store.add_interjection("r1", message)

    assert (first, again, other, plain) == (1, 1, 2, 3)
    assert [seq for seq, _m, _md in store.pending_interjections("r1")] == [1, 2, 3]
    assert store.load_run("r1").interjections_pending == 3
    with pytest.raises(InvocationError, match="used for another message"):
        store.add_interjection("r1", {"role": "user", "content": "something else"}, interjection_id="req-1")
    finish = _commit(finish=RunFinish("completed", "done", None, None, None))
    finish.consumed_interjections = [1, 2, 3]
    assert store.commit(finish).applied
    assert store.add_interjection("r1", message, interjection_id="req-2") == 2  # a late retry, answered
    with pytest.raises(AgentInterjectionError):
        store.add_interjection("r1", message, interjection_id="req-3")


def test_a_run_being_cancelled_accepts_no_interjection(store):
    """Execution.close() cancels: no handle in any process may interject after that."""
    _create(store)
    assert store.request_cancel("r1")
    with pytest.raises(AgentInterjectionError, match="is being cancelled"):
        store.add_interjection("r1", {"role": "user", "content": "too late"})
    assert store.pending_interjections("r1") == []


def test_an_interjection_answer_names_the_reply_of_the_turn_that_read_it(store):
    _create(store, steps=("root/turn-0/model", "root/turn-1/model"))
    first = store.add_interjection("r1", {"role": "user", "content": "one"}, interjection_id="req-1")
    second = store.add_interjection("r1", {"role": "user", "content": "two"})
    assert store.interjection_answer("r1", first).status == "pending"
    commit = _commit()
    commit.step_result = {"ok": True, "reply_message": 1}
    commit.consumed_interjections = [first, second]
    assert store.commit(commit).applied

    answer = store.interjection_answer("r1", second)

    assert (answer.status, answer.step) == ("answered", "root/turn-0/model")
    assert answer.message["role"] == "assistant" and answer.numbers == (1, 2) and answer.interjection_ids == ("req-1",)
    with pytest.raises(RunNotFoundError, match="no interjection number 3"):
        store.interjection_answer("r1", 3)


def test_an_interjection_an_ending_consumed_has_no_answer(store):
    _create(store)
    number = store.add_interjection("r1", {"role": "user", "content": "late"})
    ending = _commit(finish=RunFinish("cancelled", None, None, {}, None))
    ending.consumed_interjections = [number]
    assert store.commit(ending).applied

    assert store.interjection_answer("r1", number).status == "unanswered"


CLOSE_UNDER_A_READER = """
import threading
from lg_core.store import RunStore

for _ in range(300):
    store = RunStore("sqlite://")
    reading = threading.Event()

    def reader():
        reading.set()
        while True:
            try:
                store.list_runs(limit=5)
            except Exception:  # the store was closed: the error a reader must get
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    reading.wait()
    store.close()
    thread.join(10)
    assert not thread.is_alive()
"""


def test_closing_the_in_memory_store_under_a_reading_thread_gives_it_an_error_not_a_crash():
    """A thread still following a run reads the store while its runtime closes (a test ending,
    a process shutting down): closing its one shared connection then crashed the process.
    Run in a child process, so a crash fails this test instead of ending the test run."""
    root = Path(__file__).resolve().parents[2]
    child = subprocess.run(
        [sys.executable, "-c", CLOSE_UNDER_A_READER],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])


def test_a_thread_ending_never_rolls_back_another_threads_transaction():
    """The in-memory store's one connection is shared: a thread that used it and then
    ended must not end (roll back) the transaction another thread has open on it."""
    store = RunStore("sqlite://")
    db = store.db
    used, go = threading.Event(), threading.Event()

    def other():
        with db.reader() as tx:
            tx.cursor.execute("SELECT 1").fetchall()
        used.set()
        go.wait(30)  # ends (dropping its connection) while the main thread is inside a transaction

    thread = threading.Thread(target=other)
    thread.start()
    assert used.wait(30)
    with db.transaction() as tx:
        tx.cursor.execute("CREATE TABLE t (x INTEGER)")
        tx.cursor.execute("INSERT INTO t VALUES (1)")
        go.set()
        thread.join(30)
        gc.collect()
    with db.reader() as tx:
        assert tx.cursor.execute("SELECT x FROM t").fetchall() == [(1,)]
    store.close()


# -- at_most_once calls: the mark that the tool starts (lg_core.engine._at_most_once) ------------


def test_only_the_attempt_holding_a_step_marks_its_tool_started(store):
    _create(store, steps=("root/turn-0/model", "root/t"))
    assert store.claim_step("r1", "root/t", "host:1:1", lease_seconds=30) == 1
    assert not store.mark_body_entered("r1", "root/t", "host:2:1", 1)  # not the holder
    assert not store.mark_body_entered("r1", "root/t", "host:1:1", 2)  # not its attempt
    assert store.load_step("r1", "root/t").body_entered_at is None
    assert store.mark_body_entered("r1", "root/t", "host:1:1", 1)
    first = store.load_step("r1", "root/t").body_entered_at
    assert first is not None
    assert store.mark_body_entered("r1", "root/t", "host:1:1", 1)  # a retried write finds its own mark
    assert store.load_step("r1", "root/t").body_entered_at == first

    taken = store.claim_and_load("r1", "root/t", "host:2:1", 30, stale_holder="host:1:1")

    assert (taken.attempts, taken.step.body_entered_at) == (2, first)  # the next attempt reads it with its claim
    assert not store.mark_body_entered("r1", "root/t", "host:1:1", 1)  # the first attempt lost its claim


# -- a run that ends closes the steps it leaves open -----------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "closed"), [("cancelled", "cancelled"), ("partial", "failed"), ("failed", "failed")]
)
def test_a_run_ended_outside_its_steps_closes_the_steps_it_left_open(store, outcome, closed):
    _create(store)
    assert store.commit(_commit(new=["root/turn-1/tool/a", "root/turn-1/tool/b"])).applied
    assert store.claim_step("r1", "root/turn-1/tool/a", "host:1:1", lease_seconds=30) == 1
    ending = _commit(key=None, version=1, events=1, finish=RunFinish(outcome, None, {"name": "Stop"}, {}, None))

    assert store.commit(ending).applied

    assert store.load_steps("r1", open_only=True) == []
    steps = {step.key: step for step in store.load_steps("r1")}
    for key in ("root/turn-1/tool/a", "root/turn-1/tool/b"):
        step = steps[key]
        assert (step.status, step.holder, step.lease_until, step.event_seq) == (closed, None, None, None)
        assert step.finished_at is not None and step.input == {"id": key}
    assert (steps["root/turn-1/tool/a"].attempts, steps["root/turn-1/tool/b"].attempts) == (1, 0)
    assert steps["root/turn-0/model"].status == "succeeded"  # a finished step keeps its status
    # The attempt still running tool a can neither renew its lease, start an at_most_once tool, nor commit.
    held = ("r1", "root/turn-1/tool/a", 1)
    assert store.renew_leases("host:1:1", 30, [held]) == [held]
    assert not store.mark_body_entered("r1", "root/turn-1/tool/a", "host:1:1", 1)
    late = _commit(key="root/turn-1/tool/a", version=2)
    late.holder = "host:1:1"
    assert (store.commit(late).applied, store.commit(late).reason) == (False, "run_not_running")
    assert store.claim_step("r1", "root/turn-1/tool/b", "host:2:1", lease_seconds=30) is None
    assert store.load_step("r1", "root/turn-1/tool/a").status == closed


def test_a_completing_commit_leaves_no_open_step_either(store):
    _create(store, steps=("root/turn-0/model", "root/x"))
    assert store.commit(_commit(finish=RunFinish("completed", "done", None, {}, None))).applied
    assert store.load_steps("r1", open_only=True) == []
    assert store.load_step("r1", "root/x").status == "cancelled"


# -- a commit that claims the successor its worker runs next (lg_core.engine._preclaim) ---------------


def test_a_commit_claims_the_successor_its_worker_runs_next_and_leaves_the_others_in_the_outbox(store_url):
    store = RunStore(store_url, relay_grace=0.0)
    try:
        _create(store)
        assert store.claim_step("r1", "root/turn-0/model", "host:1:1", lease_seconds=30) == 1
        commit = _commit(new=["root/turn-0/tool/a", "root/turn-0/tool/b"])
        commit.holder = "host:1:1"
        commit.claimed_successor, commit.lease_seconds = "root/turn-0/tool/a", 30.0
        assert store.commit(commit).applied

        claimed, scheduled = (store.load_step("r1", f"root/turn-0/tool/{name}") for name in ("a", "b"))
        assert (claimed.status, claimed.holder, claimed.attempts) == ("running", "host:1:1", 1)
        assert claimed.input == {"id": "root/turn-0/tool/a"} and claimed.scheduled_by == "root/turn-0/model"
        assert store.clock() + 20 < claimed.lease_until <= store.clock() + 30
        assert (scheduled.status, scheduled.holder, scheduled.attempts) == ("scheduled", None, 0)
        time.sleep(0.02)
        assert [due.step.key for due in store.relay_due_steps()] == ["root/turn-0/tool/b"]  # the claimed one is not due
        # Held like any claim: nobody else takes it while its lease runs; its attempt may start its tool.
        assert store.claim_step("r1", "root/turn-0/tool/a", "host:2:1", lease_seconds=30) is None
        assert store.mark_body_entered("r1", "root/turn-0/tool/a", "host:1:1", 1)
        # A dead holder's claimed successor is taken over like any step it held.
        assert store.claim_step("r1", "root/turn-0/tool/a", "host:2:1", 30, stale_holder="host:1:1") == 2
    finally:
        store.close()
