"""lg_core.fork: a new run with another run's history before a chosen step, continued live."""

from __future__ import annotations

import pytest

import lg_core
from lg_core import Invocation
from lg_core.errors import ConfigurationError, InvocationError, RunNotFoundError
from tests.replay.conftest import gapless
from tests.replay.replay_app import CALLS, ReplayAgent, step_calls


@pytest.fixture
def finished(file_config, outage):
    """A completed run: three turns with one step call each, then the answer."""
    model, target = outage
    model.down = False
    run = ReplayAgent.ask("Record every step.", target=target, settings={"tone": "dry"}, session_id="conversation-1")
    assert run.outcome == "completed", run.error
    return run


def stored_messages(run_id):
    return lg_core.current_runtime().store.load_messages(f"{run_id}/root")


def test_fork_from_a_model_step_continues_with_another_model(finished, script):
    alternative = script(lambda request: {"text": f"Forked after {len(request.messages)} messages."})
    seen = []

    fork = lg_core.fork(finished.id, "root/turn-2/model", model=alternative, on_event=seen.append)

    assert fork.id != finished.id
    assert fork.outcome == "completed", fork.error
    assert fork.response == "Forked after 5 messages."
    assert step_calls() == [0, 1, 2], "the fork ran no tool call: its model answered at once"
    original, forked = stored_messages(finished.id), stored_messages(fork.id)
    assert forked[:5] == original[:5], "the fork's history is the original's up to turn 2"
    assert len(forked) == 6 and forked[5] != original[5]
    record = lg_core.current_runtime().store.load_run(fork.id)
    assert record.parent_run_id == finished.id
    assert fork.invocation.model_override == alternative
    assert fork.invocation.settings == {"tone": "dry"}
    assert fork.invocation.session_id == fork.id, "a fork has its own session"
    sessions = lg_core.current_runtime().session_store
    assert len(sessions.load(fork.id).messages) == 6, "holding the fork's whole conversation"
    assert len(sessions.load("conversation-1").messages) == 8, "the original's session is unchanged"
    assert gapless(fork)
    events = fork.events()
    marker = next(e for e in events if e.type == "run_forked")
    copied = [(e.type, e.seq) for e in finished.events()[: marker.seq - 1]]
    assert [(e.type, e.seq) for e in events[: marker.seq - 1]] == copied
    assert events[0].data["run_id"] == fork.id, "copied events name the new run"
    assert marker.data["parent_run_id"] == finished.id
    assert marker.data["from_step"] == "root/turn-2/model"
    assert marker.data["restored_from"] == "root/turn-1/tool/call_1_0"
    assert marker.data["model"] == alternative
    assert seen[0].type == "run_forked" and seen[-1].type == "run_stop"
    assert [e.seq for e in finished.events()] == list(range(1, len(finished.events()) + 1))
    assert "run_forked" not in {e.type for e in finished.events()}, "the original is not written to"


def test_fork_from_a_tool_call_runs_it_and_its_siblings_again(file_config, script):
    calls = [{"name": "step", "id": "a", "arguments": {"n": 1}}, {"name": "step", "id": "b", "arguments": {"n": 2}}]
    target = script([{"tool_calls": calls}, {"text": "Both recorded."}])
    original = ReplayAgent.ask("Record two steps.", target=target)
    assert original.outcome == "completed"

    fork = lg_core.fork(original.id, "root/turn-0/tool/b", run_id="fork-of-two")

    assert fork.id == "fork-of-two"
    assert fork.outcome == "completed", fork.error
    assert step_calls() == [1, 1, 2, 2]
    keys = {key for _tool, _n, key in CALLS}
    assert keys == {
        f"{original.id}/root/turn-0/tool/a",
        f"{original.id}/root/turn-0/tool/b",
        "fork-of-two/root/turn-0/tool/a",
        "fork-of-two/root/turn-0/tool/b",
    }
    steps = {s.key: s for s in lg_core.current_runtime().store.load_steps(fork.id)}
    assert steps["root/turn-0/tool/a"].scheduled_by == steps["root/turn-0/tool/b"].scheduled_by == "root/turn-0/model"
    assert fork.invocation.session_id == "fork-of-two"


def test_fork_settings_are_merged_into_the_original_ones(finished, script):
    echo = script(lambda request: {"text": repr(sorted(request.settings.items()))})

    fork = lg_core.fork(finished.id, "root/turn-0/model", model=echo, settings={"temperature": 0.2})
    dropped = lg_core.fork(finished.id, "root/turn-0/model", model=echo, settings={"tone": None})

    assert fork.response == "[('temperature', 0.2), ('tone', 'dry')]"
    assert dropped.response == "[]"


def test_a_fork_can_be_retried_and_forked_again(finished, script):
    provider = {"down": True}

    def flaky(request):
        return (
            {"error": {"kind": "http", "status": 503, "message": "down"}}
            if provider["down"]
            else {"text": "Second try."}
        )

    fork = lg_core.fork(finished.id, "root/turn-1/model", model=script(flaky))
    assert fork.outcome == "failed"
    provider["down"] = False
    retried = lg_core.retry(fork.id)
    assert retried.outcome == "completed", retried.error
    assert retried.response == "Second try."

    grandchild = lg_core.fork(fork.id, "root/turn-0/tool/call_0_0")  # a step the fork copied
    assert grandchild.outcome == "completed", grandchild.error
    assert grandchild.response == "Second try.", "the fork's model override is inherited"
    assert lg_core.current_runtime().store.load_run(grandchild.id).parent_run_id == fork.id
    assert stored_messages(grandchild.id)[:2] == stored_messages(finished.id)[:2]
    assert step_calls() == [0, 0, 1, 2], "the grandchild ran turn 0's call again, nothing else"
    assert gapless(retried) and gapless(grandchild)


def test_a_fork_of_a_fork_keeps_the_record_of_how_its_parent_was_forked(finished):
    """The grandchild's log copies the child's run_forked event as it was: the child's, not its own."""
    child = lg_core.fork(finished.id, "root/turn-1/model", run_id="child")
    grandchild = lg_core.fork(child.id, "root/turn-2/model", run_id="grandchild")

    assert grandchild.outcome == "completed", grandchild.error
    markers = [event.data for event in grandchild.events() if event.type == "run_forked"]
    assert [(m["run_id"], m["parent_run_id"], m["from_step"]) for m in markers] == [
        ("child", finished.id, "root/turn-1/model"),
        ("grandchild", "child", "root/turn-2/model"),
    ]
    assert grandchild.events()[0].data["run_id"] == "grandchild", "its own copied events still name it"


# -- bad input ---------------------------------------------------------------------------------------


def test_forking_an_unknown_run_raises_run_not_found(file_config):
    with pytest.raises(RunNotFoundError, match="no-such-run"):
        lg_core.fork("no-such-run", "root/turn-0/model")


def test_an_unknown_step_lists_the_steps_to_fork_from(finished):
    with pytest.raises(InvocationError, match="does not exist") as caught:
        lg_core.fork(finished.id, "root/turn-9/model")
    message = str(caught.value)
    assert "root/turn-0/model" in message and "root/turn-2/tool/call_2_0" in message and "root/turn-3/model" in message
    assert "root/start" not in message


def test_the_start_marker_is_not_a_step_to_fork_from(finished):
    with pytest.raises(InvocationError, match="cannot be forked from"):
        lg_core.fork(finished.id, "root/start")


async def async_consumer(event):
    pass


@pytest.mark.parametrize(
    ("options", "error", "fragment"),
    [
        ({"model": "no-such-role"}, ConfigurationError, "no-such-role"),
        ({"model": ":bad"}, InvocationError, "model_override"),
        ({"settings": ["temperature", 0.2]}, InvocationError, "settings must be a mapping"),
        ({"run_id": "bad id!"}, InvocationError, "run_id"),
        ({"deadline": -1}, InvocationError, "deadline"),
        ({"deadline": 10**400}, InvocationError, "deadline is too far in the future"),
        ({"deadline": -(10**400)}, InvocationError, "deadline is negative"),
        ({"on_event": 5}, InvocationError, "on_event must be callable with each StreamEvent, got int"),
        ({"on_event": async_consumer}, InvocationError, "on_event is an async function"),
    ],
)
def test_bad_fork_options_raise_before_anything_is_written(finished, options, error, fragment):
    before = len(lg_core.list_runs())
    with pytest.raises(error, match=fragment):
        lg_core.fork(finished.id, "root/turn-1/model", **options)
    assert len(lg_core.list_runs()) == before


@pytest.mark.parametrize("step", [None, "", 3])
def test_a_missing_step_key_raises_invocation_error(finished, step):
    with pytest.raises(InvocationError, match="from_step"):
        lg_core.fork(finished.id, step)


def test_a_taken_run_id_raises_and_keeps_the_existing_run(finished):
    with pytest.raises(InvocationError, match="already exists"):
        lg_core.fork(finished.id, "root/turn-1/model", run_id=finished.id)
    assert lg_core.get_run(finished.id).outcome == "completed"
    assert lg_core.current_runtime().store.load_run(finished.id).parent_run_id is None


def test_a_caller_cannot_pass_model_override_only_a_fork_records_it(file_config, script):
    """An app forwarding request fields (ask(**payload)) must not let its client pick the model."""
    own, other = script([{"text": "own model"}]), script([{"text": "other model"}, {"text": "other model"}])

    for passing in (
        lambda: ReplayAgent.ask("Which model?", target=own, model_override=other),
        lambda: ReplayAgent.ask(**{"message": "Which model?", "target": own, "model_override": other}),
        lambda: Invocation.from_dict({"message": "Which model?", "model_override": other}),
    ):
        with pytest.raises(InvocationError, match="model_override is not an invocation field a caller can pass"):
            passing()

    original = ReplayAgent.ask("Which model?", target=own)
    fork = lg_core.fork(original.id, "root/turn-0/model", model=other)

    assert (original.response, fork.response) == ("own model", "other model")
    assert lg_core.get_run(fork.id).invocation.model_override == other
    resumed = Invocation.restore(lg_core.current_runtime().store.load_run(fork.id).invocation)
    assert resumed.model_override == other
    assert Invocation.coerce(resumed, settings={"temperature": 0}).model_override == other


def test_a_fork_keeps_the_execution_state_of_the_original_request(file_config, outage, script):
    """Like its actor, a fork keeps the ExecutionState its original run captured, not the forker's."""
    model, target = outage
    model.down = False
    with lg_core.ExecutionState.with_({"request_id": "original-request"}):
        original = ReplayAgent.ask("Record every step.", target=target)
    with lg_core.ExecutionState.with_({"request_id": "forking-request"}):
        fork = lg_core.fork(original.id, "root/turn-2/model", model=script(lambda request: {"text": "forked"}))
    assert fork.completed
    assert lg_core.current_runtime().store.load_run(fork.id).execution_state == {"request_id": "original-request"}
    assert fork.execution_state["request_id"] == "original-request"
