"""Every bound of the subagent manager reaches the parent's model as a failed tool result, and the run
goes on: the model reads the sentence and answers anyway."""

import json
import time

import pytest

from lg_core import Agent
from lg_core.providers import scripted
from lg_core.subagents.declarations import subagent


def _echo_child(request):
    return {"text": "child says " + request.messages[-1].text}


class BoundResearchAgent(Agent):
    model = "scripted:bounds-child"
    description = "Investigates a bounded question"


def _results(request):
    found = []
    for message in request.messages:
        if message.role == "tool":
            for block in message.content:
                found.append((block.status, "".join(getattr(part, "text", "") for part in block.content)))
    return found


def _scripted_parent(calls):
    """A parent making ``calls`` one per turn, then answering with every tool result as JSON."""

    def turn(request):
        made = sum(1 for m in request.messages if m.role == "assistant")
        if made < len(calls):
            name, arguments = calls[made]
            return {"tool_calls": [{"id": f"c{made}", "name": name, "arguments": arguments}]}
        return {"text": json.dumps(_results(request))}

    return turn


def _parent_with(calls, bounds):
    scripted.register("bounds-parent", _scripted_parent(calls))

    class BoundedParent(Agent):
        model = "scripted:bounds-parent"
        subagents = [subagent(BoundResearchAgent, kind="research")]
        subagent_limits = bounds
        subagent_long_poll_duration = 5.0
        limits = {"max_turns": 30}

    return BoundedParent


@pytest.fixture(autouse=True)
def child_script():
    scripted.register("bounds-child", _echo_child)
    yield
    scripted.unregister("bounds-child")
    scripted.unregister("bounds-parent")


def _spawn(name, task="look", kind="research", mode="async"):
    return ("spawn_subagent", {"kind": kind, "task_name": name, "task": task, "mode": mode})


def _ask(calls, limits=None):
    run = _parent_with(calls, limits or {}).ask("go")
    assert run.completed, run.error
    return [(status, text) for status, text in json.loads(run.response)]


def test_a_duplicate_name_an_unknown_kind_and_a_bad_task_name_are_refused_and_the_run_goes_on():
    results = _ask([_spawn("alpha"), _spawn("alpha"), _spawn("beta", kind="legal"), _spawn("Bad Name")])
    assert results[0][0] == "success" and '"/root/alpha"' in results[0][1]
    assert results[1][0] == "error" and "already exists" in results[1][1]
    assert results[2][0] == "error" and "'legal'" in results[2][1]
    assert results[3][0] == "error" and "task name 'Bad Name' may contain only" in results[3][1]


def test_max_identities_refuses_another_spawn():
    results = _ask([_spawn("alpha"), _spawn("beta")], {"max_identities": 1})
    assert results[1][0] == "error" and "already has 1 subagents" in results[1][1]


def test_max_message_chars_refuses_a_long_task():
    results = _ask([_spawn("alpha", task="x" * 50)], {"max_message_chars": 20})
    assert results[0][0] == "error" and "at most 20" in results[0][1]


def test_max_turns_refuses_a_turn_past_the_run_budget():
    results = _ask(
        [_spawn("alpha"), ("send_subagent_message", {"subagent_id": "/root/alpha", "message": "more"})],
        {"max_turns": 1},
    )
    assert results[1][0] == "error" and "used its 1 subagent turns" in results[1][1]


def test_max_queued_turns_per_identity_refuses_a_follow_up_past_it():
    send = ("send_subagent_message", {"subagent_id": "/root/alpha", "message": "more", "mode": "async"})
    calls = [("spawn_subagent", {"kind": "research", "task_name": "alpha", "task": "look"})]
    # The child answers at once, so how many follow-ups are still queued when the next one is sent varies;
    # once one is refused, the sentence names the bound.
    results = _ask([*calls, send, send, send], {"max_queued_turns_per_identity": 1})
    assert results[1][0] == "success"
    for status, text in results[2:]:
        assert status == "success" or "already has 1 follow-ups queued" in text


def test_an_unknown_subagent_id_is_refused_by_send_and_wait():
    results = _ask(
        [
            ("send_subagent_message", {"subagent_id": "/root/nobody", "message": "hi"}),
            ("wait_for_subagents", {"subagent_ids": ["/root/nobody"]}),
        ]
    )
    assert all(status == "error" and "no subagent '/root/nobody'" in text for status, text in results)


def test_a_wait_returns_the_answer_and_list_shows_the_identity():
    results = _ask([_spawn("alpha"), ("wait_for_subagents", {}), ("list_subagents", {})])
    waited = json.loads(results[1][1])
    assert waited["status"] == "ready"
    assert waited["subagents"][0]["response"] == "child says look"
    listed = json.loads(results[2][1])
    assert [view["subagent_id"] for view in listed["subagents"]] == ["/root/alpha"]


def test_a_wait_with_nothing_finished_in_its_long_poll_returns_still_working():
    def slow_child(request):
        return {"text": "late", "delay": 3.0}

    scripted.register("bounds-child", slow_child)
    scripted.register("bounds-parent", _scripted_parent([_spawn("alpha"), ("wait_for_subagents", {})]))

    class Impatient(Agent):
        model = "scripted:bounds-parent"
        subagents = [subagent(BoundResearchAgent, kind="research")]
        subagent_long_poll_duration = 0.3

    run = Impatient.ask("go")
    assert run.completed, run.error
    waited = json.loads(json.loads(run.response)[1][1])
    assert waited["status"] == "still_working"
    assert waited["subagents"][0]["status"] == "working"


def test_a_parent_that_answers_while_its_child_works_stops_the_child():
    from lg_core.assemblies.child_runs import child_run_id
    from lg_core.runtime import current_runtime

    scripted.register("bounds-child", lambda request: {"text": "late", "delay": 5.0})
    scripted.register("bounds-parent", _scripted_parent([_spawn("alpha")]))

    class Hasty(Agent):
        model = "scripted:bounds-parent"
        subagents = [subagent(BoundResearchAgent, kind="research")]

    started = time.monotonic()
    run = Hasty.ask("go")
    assert run.completed, run.error
    assert time.monotonic() - started < 3  # the child's 5 s model call was cut short, not waited for
    store = current_runtime().store
    child_id = child_run_id(run.id, "root/subagent-2/alpha")
    deadline = time.monotonic() + 10
    while not store.load_run(child_id).finished:
        assert time.monotonic() < deadline, "the child went on after its parent ended"
        time.sleep(0.05)
    assert store.load_run(child_id).status == "cancelled"


def test_repeated_still_working_waits_are_not_a_tool_loop():
    def until_ready(request):
        results = _results(request)
        if not results:
            return {
                "tool_calls": [
                    {
                        "id": "s",
                        "name": "spawn_subagent",
                        "arguments": {"kind": "research", "task_name": "alpha", "task": "look"},
                    }
                ]
            }
        if '"ready"' in results[-1][1]:
            return {"text": json.dumps(results)}
        return {"tool_calls": [{"id": f"w{len(results)}", "name": "wait_for_subagents", "arguments": {}}]}

    scripted.register("bounds-child", lambda request: {"text": "late", "delay": 1.5})
    scripted.register("bounds-parent", until_ready)

    class Watchful(Agent):
        model = "scripted:bounds-parent"
        subagents = [subagent(BoundResearchAgent, kind="research")]
        subagent_long_poll_duration = 0.2
        detect_tool_loops = {"warning_at": 2, "terminate_at": 3}
        limits = {"max_turns": 40}

    run = Watchful.ask("go")
    assert run.completed, run.error
    texts = [text for _status, text in json.loads(run.response)]
    assert sum('"still_working"' in text for text in texts) >= 3  # more identical answers than terminate_at
    assert not any("this exact call to wait_for_subagents" in text for text in texts)
