"""What monitoring is told about step tasks: display arguments, run endings, lost tasks, worker names."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lg_core.engine.dispatcher import StepRef
from lg_core.engine.run_endings import RunEnding, note_ending, take_ending
from lg_core.errors import CancelledError, DeadlineExceededError, HTTPError
from lg_core.store import NewStep
from lg_scheduler.lost_tasks import LostTasks
from lg_workers.continuation import Announcer
from lg_workers.task_display import display_args, parse_display
from lg_workers.task_outcomes import RunFailed, task_result
from lg_workers.worker import WorkerGroup, worker_names


def test_a_tool_calls_display_leads_with_its_tool_and_names_run_and_step():
    ref = StepRef.of(
        "r1", NewStep(key="root/turn-0/tool/c1", frame_id="r1/root", kind="tool", input={"name": "lookup"})
    )
    assert display_args(ref) == "tool=lookup run=r1 step=root/turn-0/tool/c1"
    assert parse_display(display_args(ref)) == ("r1", "root/turn-0/tool/c1")


def test_a_model_turns_display_names_run_and_step_only():
    ref = StepRef.of("r1", NewStep(key="root/turn-0/model", frame_id="r1/root", kind="model"))
    assert display_args(ref) == "run=r1 step=root/turn-0/model"
    assert parse_display("['r1']") is None and parse_display(None) is None


@pytest.mark.parametrize("name", ["4242 4242 4242", "x" * 65, "", None, 7, "a;rm -rf /"])
def test_a_tool_name_no_tool_could_have_is_not_repeated_to_monitoring(name):
    ref = StepRef.of("r1", NewStep(key="root/turn-0/tool/c1", frame_id="r1/root", kind="tool", input={"name": name}))
    assert ref.label == "?"


def test_a_label_is_not_part_of_a_steps_identity():
    assert StepRef("r", "k", "tool", "f", "lookup") == StepRef("r", "k", "tool", "f")


def test_a_run_ending_names_outcome_class_and_fixed_sentence_never_the_errors_text():
    ending = RunEnding.of("failed", HTTPError("upstream echoed sk-secret-123", status=500))
    assert ending.failed
    assert ending.summary == "run failed: HTTPError: the model provider returned an error."
    assert RunEnding.of("partial", DeadlineExceededError("x")).summary.startswith("run partial: DeadlineExceededError")
    assert RunEnding.of("cancelled", CancelledError("the user's private reason")).summary == "run cancelled"


def test_an_ending_is_taken_once_by_the_thread_that_committed_it():
    note_ending(RunEnding("completed", "run completed"))
    assert take_ending() == RunEnding("completed", "run completed")
    assert take_ending() is None


def test_a_task_result_adds_how_the_run_ended():
    assert task_result("executed", None) == "executed"
    assert task_result("executed", RunEnding("completed", "run completed")) == "executed: run completed"


def announcer(sent: list) -> Announcer:
    task = SimpleNamespace(request=SimpleNamespace(id="t0", root_id="t0", hostname="lg-model@h"), app=None)
    result = Announcer(task)
    result.flush = lambda: sent.extend(result._pending)  # type: ignore[method-assign]
    return result


def test_an_inline_step_that_failed_its_run_is_announced_as_a_failed_task():
    sent: list = []
    chain = announcer(sent)
    chain.start(StepRef("r1", "root/turn-1/model", "model", "r1/root"))
    chain.finished("executed", RunEnding.of("failed", HTTPError("body", status=500)))
    chain.flush()
    events = {event: fields for _id, event, fields in sent}
    assert "task-succeeded" not in events
    assert (
        repr(RunFailed("run failed: HTTPError: the model provider returned an error."))
        == events["task-failed"]["exception"]
    )


def test_an_inline_step_that_completed_its_run_says_so_in_its_result():
    sent: list = []
    chain = announcer(sent)
    chain.start(StepRef("r1", "root/turn-1/model", "model", "r1/root"))
    chain.finished("executed", RunEnding("completed", "run completed"))
    chain.flush()
    assert {event: fields for _id, event, fields in sent}["task-succeeded"]["result"] == "'executed: run completed'"


def step(run_id: str, key: str) -> SimpleNamespace:
    return SimpleNamespace(run_id=run_id, key=key)


def test_lost_tasks_are_the_started_tasks_of_the_re_sent_steps_and_are_reported_once():
    lost = LostTasks(app=None)
    lost.on_event({"type": "task-received", "uuid": "u1", "args": "run=r1 step=root/turn-0/model"})
    lost.on_event({"type": "task-started", "uuid": "u1", "hostname": "lg-model@h"})
    lost.on_event({"type": "task-received", "uuid": "u2", "args": "tool=x run=r1 step=root/turn-0/tool/c"})
    lost.on_event({"type": "task-started", "uuid": "u2", "hostname": "lg-tools@h"})
    lost.on_event({"type": "task-succeeded", "uuid": "u2"})
    lost.on_event({"type": "task-received", "uuid": "u3", "args": "run=r2 step=root/turn-0/model"})  # never started
    held = lost.held(
        [step("r1", "root/turn-0/model"), step("r1", "root/turn-0/tool/c"), step("r2", "root/turn-0/model")]
    )
    assert [(t.uuid, t.worker) for t in held] == [("u1", "lg-model@h")]
    assert lost.held([step("r1", "root/turn-0/model")]) == []


def test_lost_tasks_remember_a_bounded_number_of_tasks():
    lost = LostTasks(app=None, max_tracked=3)
    for n in range(10):
        lost.on_event({"type": "task-received", "uuid": f"u{n}", "args": f"run=r step=s{n}"})
        lost.on_event({"type": "task-started", "uuid": f"u{n}", "hostname": "w@h"})
    assert [t.uuid for t in lost.held([step("r", f"s{n}") for n in range(10)])] == ["u7", "u8", "u9"]


def test_lost_tasks_ignore_other_tasks_and_malformed_events():
    lost = LostTasks(app=None)
    lost.on_event({"type": "task-received", "uuid": "u1", "args": "['r1']"})  # lg.advance
    lost.on_event({"type": "task-started", "uuid": "u1", "hostname": "w@h"})
    lost.on_event({"type": "task-started", "hostname": "w@h"})
    lost.on_event({"type": "worker-heartbeat"})
    assert lost.held([step("r1", "x")]) == []


def test_worker_names_say_which_queues_they_serve():
    groups = [
        WorkerGroup("threads", 8, ("lg.orchestrate", "lg.model", "lg.tools")),
        WorkerGroup("prefork", 2, ("lg.sandbox",)),
    ]
    assert worker_names(groups) == ["lg-orchestrate+model+tools", "lg-sandbox"]
