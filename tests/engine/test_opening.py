"""A run's conversation is opened by its first step and written by that step's commit.

Starting a run stores it unopened (one commit); the process that executes the
first step loads the history, runs the opening callbacks and writes the
initial messages in the same commit as the step's own result. These tests
read the SQLite file to check what was written, and make a second opener win
the race to see the first step go on from the frame the winner stored.
"""

from __future__ import annotations

import sqlite3

import lg_core
from lg_core import Agent, before_invocation
from lg_core.engine._checkpoint import AgentCheckpoint
from lg_core.messages import Message
from lg_core.store import StepCommit


class OpenedAgent(Agent):
    system_prompt = "Answer briefly."

    @classmethod
    def select_model(cls, invocation):
        return invocation["target"]


def stored_frame(configuration, run_id):
    path = configuration.run_store.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        [(version,)] = db.execute("select version from lg_frames where run_id = ?", (run_id,)).fetchall()
        messages = db.execute("select seq, role from lg_messages where run_id = ? order by seq", (run_id,)).fetchall()
    return version, messages


def test_a_one_turn_run_writes_its_opening_with_its_only_step(file_config, script):
    target = script([{"text": "Hello."}])
    history = [Message(role="user", content="Earlier."), Message(role="assistant", content="Noted.")]

    run = OpenedAgent.ask("Hi", history=history, target=target)

    assert run.completed and run.response == "Hello."
    version, messages = stored_frame(file_config, run.id)
    assert version == 1  # one commit onto the unopened frame: opening and turn together
    assert messages == [(0, "user"), (1, "assistant"), (2, "user"), (3, "assistant")]
    assert [m.text for m in run.result.messages] == ["Earlier.", "Noted.", "Hi", "Hello."]


def test_a_tool_turn_run_numbers_its_messages_from_the_opening_on(file_config, script):
    target = script(
        [
            {"tool_calls": [{"name": "missing_tool", "id": "a", "arguments": {}}]},
            {"text": "Done."},
        ]
    )

    run = OpenedAgent.ask("Go", target=target)

    assert run.completed
    version, messages = stored_frame(file_config, run.id)
    assert version == 3  # turn 0 (with the opening), the tool call, turn 1
    assert [seq for seq, _role in messages] == list(range(len(messages)))
    assert [role for _seq, role in messages] == ["user", "assistant", "tool", "assistant"]


def test_a_first_step_that_loses_the_opening_race_goes_on_from_the_winners_frame(file_config, script):
    """Another process opens the frame while the first model turn runs here (a redelivery
    after a presumed crash): this step's commit conflicts, and its transition is applied
    to the frame the other process stored, whose messages stand."""
    runtime = file_config.runtime()

    def answer(request):
        [running] = lg_core.list_runs(status="running")
        frame_id = f"{running.id}/root"
        checkpoint = AgentCheckpoint(message_count=1, state={})
        winner = StepCommit(
            running.id,
            frame_id,
            0,
            checkpoint.to_dict(),
            messages=[(0, Message(role="user", content="Opened elsewhere."))],
        )
        assert runtime.store.commit(winner).applied
        return {"text": "Answered."}

    target = script(answer)

    run = OpenedAgent.ask("Opened here.", target=target)

    assert run.completed and run.response == "Answered."
    version, messages = stored_frame(file_config, run.id)
    assert version == 2
    assert messages == [(0, "user"), (1, "assistant")]
    stored = lg_core.get_run(run.id)
    assert [m.text for m in stored.result.messages] == ["Opened elsewhere.", "Answered."]


def test_a_run_whose_opening_callback_fails_ends_without_writing_a_turn(file_config, script):
    class RefusingAgent(OpenedAgent):
        @before_invocation
        def refuse(self, payload):
            raise RuntimeError("refused")

    target = script([{"text": "never"}])

    run = RefusingAgent.ask("Hi", target=target)

    assert run.failed
    _version, messages = stored_frame(file_config, run.id)
    assert messages == []
