"""lg_core.retry: a finished run continues from its last committed checkpoint;
committed steps are not redone and the event log records the retry."""

from __future__ import annotations

import threading

import pytest

import lg_core
from lg_core import Agent, Configuration, before_invocation, replay
from lg_core.errors import InvocationError, RunNotFoundError, RunStateError
from lg_core.providers import scripted
from lg_core.runtime import current_runtime
from tests.replay import replay_app
from tests.replay.conftest import gapless
from tests.replay.replay_app import ReplayAgent, step_calls


def test_retry_completes_a_failed_run_without_redoing_committed_steps(file_config, outage):
    model, target = outage
    failed = ReplayAgent.ask("Record every step.", target=target)
    assert failed.outcome == "failed", failed.error
    assert step_calls() == [0, 1, 2]
    error = failed.error

    model.down = False
    seen = []
    run = lg_core.retry(failed.id, on_event=seen.append)

    assert run.id == failed.id
    assert run.outcome == "completed", run.error
    assert run.response == "All steps recorded."
    assert step_calls() == [0, 1, 2], "no committed tool call ran again"
    types = [e.type for e in run.events()]
    assert types.count("run_error") == 1 and types.count("run_retried") == 1
    assert types.index("run_error") + 1 == types.index("run_retried")
    assert types[-1] == "run_stop"
    assert gapless(run)
    retried = next(e for e in run.events() if e.type == "run_retried")
    assert retried.data["step"] == "root/turn-3/model"
    assert retried.data["restored_from"] == "root/turn-2/tool/call_2_0"
    assert retried.data["previous_outcome"] == "failed"
    assert retried.data["previous_error"]["name"] == type(error).__name__ == "HTTPError"
    assert seen[0].type == "run_retried" and seen[-1].type == "run_stop", "on_event sees the retried part"
    assert [m.role for m in run.result.messages] == ["user"] + ["assistant", "tool"] * 3 + ["assistant"]
    stored = lg_core.get_run(failed.id)
    assert stored.outcome == "completed" and stored.error is None


def test_a_reattached_execution_streams_a_retried_run_to_its_last_ending(file_config, outage):
    """The log holds the old run_error; a reader (an SSE client) must not stop there."""
    model, target = outage
    failed = ReplayAgent.ask("Record every step.", target=target)
    model.down = False
    assert lg_core.retry(failed.id).completed

    types = [event.type for event in lg_core.get_execution(failed.id).events()]

    assert types.count("run_error") == 1 and types[-1] == "run_stop"
    after_error = [e.type for e in lg_core.get_execution(failed.id).events(after=f"{types.index('run_error') + 1}-0")]
    assert after_error[0] == "run_retried" and after_error[-1] == "run_stop"


def test_an_interjection_the_failed_turn_took_reaches_the_retried_turn(file_config, script):
    """The failed run's ending marked it consumed unread; the retry gives it back."""
    entered, release, seen = threading.Event(), threading.Event(), []
    state = {"down": True}

    def model(request):
        seen.append([m.text for m in request.messages if m.role == "user"])
        if state["down"]:
            entered.set()
            assert release.wait(30)
            return {"error": {"message": "provider down", "kind": "provider", "retryable": False}}
        return {"text": "Done."}

    execution = ReplayAgent.start_execution("Record every step.", target=script(model))
    assert entered.wait(30)
    execution.interject("Also include the ledger entry")
    release.set()
    assert execution.wait(timeout=30).failed

    state["down"] = False
    run = lg_core.retry(execution.run_id)

    assert run.completed, run.error
    assert seen[-1] == ["Record every step.", "Also include the ledger entry"]
    assert current_runtime().store.pending_interjections(run.id) == []


def test_a_run_that_fails_again_can_be_retried_again(file_config, outage):
    model, target = outage
    failed = ReplayAgent.ask("Record every step.", target=target)

    again = lg_core.retry(failed.id)
    assert again.outcome == "failed"
    model.down = False
    run = lg_core.retry(failed.id)

    assert run.outcome == "completed", run.error
    assert step_calls() == [0, 1, 2]
    types = [e.type for e in run.events()]
    assert types.count("run_retried") == 2 and types.count("run_error") == 2
    assert gapless(run)
    # Each retry starts a new history epoch, so no process reuses messages it cached before it.
    frame = current_runtime().store.load_frame(f"{failed.id}/root")
    assert frame.checkpoint["history_epoch"] == 2


def test_retry_keeps_a_parallel_call_that_committed_after_the_turn(file_config, script):
    # Turn 0 asks for two calls; "late" waits for "step" to commit, then an operator
    # cancels the run inside it. The last checkpoint is step's commit, not the turn's.
    replay_app.STOP_ONCE.add("late")
    calls = [
        {"name": "step", "id": "a", "arguments": {"n": 0}},
        {"name": "late", "id": "b", "arguments": {"n": 1, "after": "a"}},
    ]
    target = script([{"tool_calls": calls}, {"text": "Both recorded."}])
    cancelled = ReplayAgent.ask("Record two steps.", target=target)
    assert cancelled.outcome == "cancelled", cancelled.error
    assert lg_core.current_runtime().store.load_run(cancelled.id).cancel_requested

    run = lg_core.retry(cancelled.id)

    assert run.outcome == "completed", run.error
    assert run.response == "Both recorded."
    assert step_calls("step") == [0], "the call that committed is not redone"
    assert step_calls("late") == [1, 1], "the cancelled call runs again"
    retried = next(e for e in run.events() if e.type == "run_retried")
    assert retried.data["restored_from"] == "root/turn-0/tool/a"
    assert retried.data["rescheduled"] == ["root/turn-0/tool/b"]
    assert retried.data["previous_outcome"] == "cancelled"
    tool_message = run.result.messages[2]
    assert [block.tool_use_id for block in tool_message.content] == ["a", "b"]
    assert not lg_core.current_runtime().store.load_run(run.id).cancel_requested
    assert gapless(run)


def test_retry_never_runs_a_started_at_most_once_call_again(file_config, script):
    replay_app.STOP_ONCE.add("charge")
    target = script([{"tool_calls": [{"name": "charge", "id": "c", "arguments": {"n": 7}}]}, {"text": "Charged?"}])
    cancelled = ReplayAgent.ask("Charge the card.", target=target)
    assert cancelled.outcome == "cancelled"

    run = lg_core.retry(cancelled.id)

    assert run.outcome == "completed", run.error
    assert step_calls("charge") == [7], "an at_most_once call that started is never run twice"
    types = [e.type for e in run.events()]
    assert "tool_outcome_unknown" in types[types.index("run_retried") :]
    assert lg_core.current_runtime().store.load_step(run.id, "root/turn-0/tool/c").status == "unknown"


def test_retry_runs_an_at_most_once_call_that_never_started(file_config, script):
    """Cancelled after its claim, in before_tool: the retried call is its second attempt, but no
    attempt reached the tool, so it runs (once) instead of reporting an unknown outcome."""
    replay_app.STOP_BEFORE.add("charge")
    target = script([{"tool_calls": [{"name": "charge", "id": "c", "arguments": {"n": 7}}]}, {"text": "Charged."}])
    cancelled = ReplayAgent.ask("Charge the card.", target=target)
    assert cancelled.outcome == "cancelled"
    step = lg_core.current_runtime().store.load_step(cancelled.id, "root/turn-0/tool/c")
    assert (step.status, step.attempts, step.body_entered_at) == ("cancelled", 1, None)

    run = lg_core.retry(cancelled.id)

    assert run.outcome == "completed", run.error
    assert step_calls("charge") == [7]
    assert "tool_outcome_unknown" not in [e.type for e in run.events()]
    assert lg_core.current_runtime().store.load_step(run.id, "root/turn-0/tool/c").status == "succeeded"


# -- runs that cannot be retried ---------------------------------------------------------------------


def test_retrying_an_unknown_run_raises_run_not_found(file_config):
    with pytest.raises(RunNotFoundError, match="no-such-run"):
        lg_core.retry("no-such-run")


@pytest.mark.parametrize("bad", [None, "", 42])
def test_retrying_a_bad_run_id_raises_invocation_error(file_config, bad):
    with pytest.raises(InvocationError, match="run id"):
        lg_core.retry(bad)


async def async_consumer(event):
    pass


@pytest.mark.parametrize(
    ("on_event", "fragment"),
    [
        (5, "on_event must be callable with each StreamEvent, got int"),
        (async_consumer, "on_event is an async function"),
    ],
)
def test_a_bad_on_event_is_refused_before_the_failed_run_changes(file_config, outage, on_event, fragment):
    """Found only while the run executed, it cancelled the reopened run and replaced its error."""
    model, target = outage
    failed = ReplayAgent.ask("Record every step.", target=target)
    assert failed.outcome == "failed", failed.error
    events = len(failed.events())

    with pytest.raises(InvocationError, match=fragment):
        lg_core.retry(failed.id, on_event=on_event)

    stored = lg_core.get_run(failed.id)
    assert stored.outcome == "failed" and repr(stored.error) == repr(failed.error)
    assert len(stored.events()) == events, "a refused retry writes nothing"


def test_retrying_a_completed_run_says_to_fork_it(file_config, outage):
    model, target = outage
    model.down = False
    run = ReplayAgent.ask("Record every step.", target=target)
    events = len(run.events())

    with pytest.raises(RunStateError, match=r"completed.*lg runs fork"):
        lg_core.retry(run.id)
    assert len(run.events()) == events, "a refused retry writes nothing"


def test_retrying_a_running_run_says_to_resume_or_cancel_it(file_config, script):
    release = threading.Event()

    def slow(request):
        release.wait(30)
        return {"text": "done"}

    execution = ReplayAgent.start_execution("Wait.", target=script(slow))
    try:
        with pytest.raises(RunStateError, match=r"still running.*lg runs resume"):
            lg_core.retry(execution.run_id)
    finally:
        release.set()
        assert execution.wait(timeout=30).outcome == "completed"


def test_retrying_a_partial_run_says_which_step_to_fork_with_a_new_deadline(file_config, outage):
    model, target = outage
    model.down = False
    partial = ReplayAgent.ask("Record every step.", target=target, deadline=0)
    assert partial.outcome == "partial"

    with pytest.raises(RunStateError, match=r"deadline passed.*--from-step root/turn-0/model --deadline"):
        lg_core.retry(partial.id)

    forked = lg_core.fork(partial.id, "root/turn-0/model", deadline=60)
    assert forked.outcome == "completed", forked.error


GATE = {"closed": True}


class GatedAgent(Agent):
    model = "scripted:replay-gated"

    @before_invocation
    def gate(self, payload, context=None):
        if GATE["closed"]:
            raise ValueError("the gate is closed")
        return payload


def test_a_run_that_failed_while_opening_is_retried_from_the_start(file_config, script):
    scripted.register("replay-gated", [{"text": "Through the gate."}])
    GATE["closed"] = True
    try:
        failed = GatedAgent.ask("Hello?")
        assert failed.outcome == "failed"
        GATE["closed"] = False

        run = lg_core.retry(failed.id)
    finally:
        scripted.unregister("replay-gated")

    assert run.outcome == "completed", run.error
    assert run.response == "Through the gate."
    retried = next(e for e in run.events() if e.type == "run_retried")
    assert retried.data["step"] == "root/turn-0/model" and retried.data["restored_from"] == "root/start"
    assert [m.role for m in run.result.messages] == ["user", "assistant"], "the conversation is opened once"
    assert gapless(run)


def test_two_retries_of_one_run_cannot_both_reopen_it(file_config, outage):
    model, target = outage
    failed = ReplayAgent.ask("Record every step.", target=target)
    store = lg_core.current_runtime().store
    record = store.load_run(failed.id)
    frame = store.load_frame(f"{failed.id}/root")
    checkpoint = store.load_step(failed.id, "root/turn-2/tool/call_2_0").checkpoint
    reopen = dict(
        expected_status="failed",
        invocation=record.invocation,
        deadline_at=None,
        holder=None,
        frame_id=frame.id,
        frame_version=frame.version,
        checkpoint=checkpoint,
        message_count=checkpoint["message_count"],
        reschedule=["root/turn-3/model"],
        event=("run_retried", {"step": "root/turn-3/model"}),
    )
    store.reopen_run(failed.id, **reopen)

    with pytest.raises(RunStateError, match="no longer failed"):
        store.reopen_run(failed.id, **reopen)
    assert [e.type for e in store.load_events(failed.id)].count("run_retried") == 1


def test_a_worker_that_saw_the_old_cancel_does_not_stop_the_retried_run(file_config, script):
    # Workers run claimed steps (Engine.execute_claimed); one that noticed the first
    # attempt's cancel keeps the flag and a cached run handle with a cancelled token.
    replay_app.STOP_ONCE.add("step")
    target = script([{"tool_calls": [{"name": "step", "id": "s", "arguments": {"n": 1}}]}, {"text": "Recorded."}])
    cancelled = ReplayAgent.ask("Record a step.", target=target)
    assert cancelled.outcome == "cancelled"
    runtime = lg_core.current_runtime()
    record = runtime.store.load_run(cancelled.id)
    replay.reopen(runtime, record, replay.plan_retry(record, runtime.store.load_steps(record.id)), holder=None)
    worker = Configuration(run_store=file_config.run_store)  # another process on the same store
    try:
        engine = worker.runtime().engine
        engine.run_handle(cancelled.id).cancellation_token.cancel("seen in the first attempt")
        engine.note_cancel_requested(cancelled.id)

        outcome, successors = engine.execute_claimed(cancelled.id, "root/turn-0/tool/s")
        assert (outcome, [ref.key for ref in successors]) == ("executed", ["root/turn-1/model"])
        engine.execute_claimed(cancelled.id, "root/turn-1/model")
    finally:
        worker.close()

    assert lg_core.get_run(cancelled.id).outcome == "completed"
    assert step_calls() == [1, 1]


def test_a_retry_waits_for_no_other_run_of_its_session(file_config, script, outage):
    model, target = outage
    failed = ReplayAgent.ask("Record every step.", target=target, session_id="shared")
    assert failed.outcome == "failed"
    release = threading.Event()

    def slow(request):
        release.wait(30)
        return {"text": "done"}

    other = ReplayAgent.start_execution("Meanwhile.", target=script(slow), session_id="shared")
    try:
        with pytest.raises(RunStateError, match="another run of session 'shared'"):
            lg_core.retry(failed.id)
    finally:
        release.set()
        assert other.wait(timeout=30).outcome == "completed"
    assert lg_core.current_runtime().store.load_run(failed.id).status == "failed", "a refused retry changes nothing"


def test_a_retry_after_its_session_moved_on_is_refused_before_anything_runs(file_config, script, outage):
    """It could only redo its steps and then fail to add its turn: the error says to fork instead."""
    model, target = outage
    failed = ReplayAgent.ask("Record every step.", target=target, session_id="shared")
    assert failed.outcome == "failed"
    assert ReplayAgent.ask("Meanwhile.", target=script([{"text": "done"}]), session_id="shared").completed
    calls_before = step_calls()
    model.down = False

    with pytest.raises(RunStateError, match=r"session 'shared' has 2 messages now, 0 when run .*lg runs fork"):
        lg_core.retry(failed.id)
    assert step_calls() == calls_before
    assert lg_core.current_runtime().store.load_run(failed.id).status == "failed", "a refused retry changes nothing"


def test_a_retry_after_the_application_wrote_to_its_session_names_that_writer_too(file_config, script, outage):
    """The refusal said 'another run of the session completed since' when no other run existed:
    the application had appended to the session through Session (the spec's Session#append)."""
    from lg_core import Message
    from lg_core.session import Session

    model, target = outage
    failed = ReplayAgent.ask("Record every step.", target=target, session_id="shared")
    assert failed.outcome == "failed"
    Session("shared").append([Message(role="user", content="Written by the application.")])
    model.down = False

    with pytest.raises(RunStateError, match=r"has 1 messages now, 0 when run .* or the application through Session"):
        lg_core.retry(failed.id)


def test_a_run_cancelled_while_it_waited_for_its_session_can_be_retried(file_config, script):
    release = threading.Event()

    def slow(request):
        release.wait(30)
        return {"text": "first"}

    first = ReplayAgent.start_execution("First.", target=script(slow), session_id="queue")
    second = ReplayAgent.start_execution("Second.", target=script([{"text": "second"}]), session_id="queue")
    assert second.state == "pending"
    second.cancel()
    release.set()
    assert first.wait(timeout=30).outcome == "completed"
    assert second.wait(timeout=30).outcome == "cancelled"

    run = lg_core.retry(second.run_id)

    assert run.outcome == "completed", run.error
    assert run.response == "second"
    assert [m.text for m in run.result.messages] == ["First.", "first", "Second.", "second"], "it took its turn"


def test_a_run_without_a_step_to_run_again_cannot_be_retried():
    from lg_core.store import RunRecord, StepRecord

    record = RunRecord(
        "r",
        "m:A",
        "agent",
        "failed",
        {},
        "r",
        None,
        None,
        None,
        None,
        False,
        2,
        None,
        {"name": "ValueError", "message": "boom"},
        None,
        None,
        None,
        0.0,
        0.0,
        0.0,
    )
    start = StepRecord(
        "r",
        "root/start",
        "r/root",
        "start",
        "succeeded",
        None,
        None,
        None,
        1,
        None,
        None,
        0.0,
        0.0,
        0.0,
        None,
        {"phase": "opening", "message_count": 0},
        1,
    )
    with pytest.raises(RunStateError, match="ValueError: boom.*start it again"):
        replay.plan_retry(record, [start])
    with pytest.raises(RunStateError, match="no committed checkpoint"):
        replay.plan_retry(record, [])


def test_retry_refuses_a_model_it_cannot_resolve_before_reopening_the_run(tmp_path, outage):
    """A retry in a process without the run's provider connection fails before anything
    changes, instead of reopening the run only to fail it again (run_retried + run_error)."""
    from lg_core import ConfigurationError, with_configuration

    _model, target = outage
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    first = Configuration(run_store=store, providers={"remote": {"adapter": "scripted"}})
    with with_configuration(first):
        failed = ReplayAgent.ask("Record every step.", target=target.replace("scripted:", "remote:"))
    assert failed.outcome == "failed", failed.error
    first.close()

    elsewhere = Configuration(run_store=store)
    try:
        with with_configuration(elsewhere):
            before = [event.type for event in lg_core.get_run(failed.id).events()]
            with pytest.raises(ConfigurationError, match="remote"):
                lg_core.retry(failed.id)
            stored = lg_core.get_run(failed.id)
            assert stored.outcome == "failed"
            assert [event.type for event in stored.events()] == before
    finally:
        elsewhere.close()
