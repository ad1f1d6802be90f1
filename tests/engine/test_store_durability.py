"""What a run leaves in a SQLite file store: the event log, the run list, rebuilt runs,
and storage that grows by what a turn adds, not by the conversation's length."""

from __future__ import annotations

import sqlite3

import pytest
from pydantic import BaseModel, ConfigDict

import lg_core
from lg_core import Agent, Configuration, Tool, Usage, with_configuration
from lg_core.errors import InvocationError, ProviderError
from lg_core.events import LIVE_ONLY_EVENTS


class LookupTool(Tool):
    description = "Look up a topic."

    def call(self, input):
        return f"entry for {input['topic']}"


class StoredAgent(Agent):
    """Module level, so a stored run's entrypoint can be imported again by get_run."""

    tools = [LookupTool]

    @classmethod
    def select_model(cls, invocation):
        return invocation["target"]


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    approved: bool
    reason: str


class VerdictAgent(StoredAgent):
    result_schema = Verdict


def lookup(topic, call_id):
    return {"name": "lookup", "id": call_id, "arguments": {"topic": topic}}


TURNS = [
    {"tool_calls": [lookup("refunds", "a")], "usage": {"input_tokens": 10, "output_tokens": 2}},
    {"text": "Refunds take 30 days.", "usage": {"input_tokens": 20, "output_tokens": 6}},
]


def db_path(configuration):
    return configuration.run_store.removeprefix("sqlite:///")


# -- the event log -------------------------------------------------------------------------------------


def test_the_event_log_is_gapless_and_holds_no_deltas(file_config, script):
    run = StoredAgent.stream_ask("Refunds?", target=script(TURNS))
    streamed = list(run)
    events = run.events()

    assert run.outcome == "completed"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert not {e.type for e in events} & LIVE_ONLY_EVENTS
    assert "text_delta" in {e.type for e in streamed}, "deltas were streamed live"
    assert [e.type for e in events] == [e.type for e in streamed if e.type not in LIVE_ONLY_EVENTS]
    assert events[0].type == "invocation_start"
    assert events[-1].type == "run_stop"
    assert [e.seq for e in run.events(after=3)] == list(range(4, len(events) + 1))

    with sqlite3.connect(db_path(file_config)) as db:
        rows = db.execute("select seq, type from lg_events where run_id = ? order by seq", (run.id,)).fetchall()
    assert rows == [(e.seq, e.type) for e in events]


def test_list_runs_filters_by_status(file_config, script):
    completed = StoredAgent.ask("Refunds?", target=script(TURNS))
    failed = StoredAgent.ask("Refunds?", target=script([{"error": "down"}]))

    completed_ids = [record.id for record in lg_core.list_runs(status="completed")]
    failed_ids = [record.id for record in lg_core.list_runs(status="failed")]
    assert completed.id in completed_ids and failed.id not in completed_ids
    assert failed.id in failed_ids and completed.id not in failed_ids
    assert {completed.id, failed.id} <= {record.id for record in lg_core.list_runs()}


# -- rebuilding runs from the store ----------------------------------------------------------------------


def test_get_run_rebuilds_a_completed_run_from_the_store(file_config, script):
    run = StoredAgent.ask("Refunds?", target=script(TURNS))

    stored = lg_core.get_run(run.id)

    assert stored is not run
    assert stored.outcome == "completed"
    assert stored.response == "Refunds take 30 days."
    assert stored.usage == Usage(input_tokens=30, output_tokens=8)
    assert stored.result.messages == run.result.messages
    assert [m.role for m in stored.result.messages] == ["user", "assistant", "tool", "assistant"]
    assert stored.entrypoint_class is StoredAgent


def test_another_runtime_on_the_same_file_sees_the_run(file_config, script):
    run = StoredAgent.ask("Refunds?", target=script(TURNS))

    other = Configuration(run_store=file_config.run_store)
    try:
        with with_configuration(other):
            stored = lg_core.get_run(run.id)
            events = stored.events()
    finally:
        other.close()

    assert stored.outcome == "completed"
    assert stored.response == run.response
    assert stored.result.messages == run.result.messages
    assert [(e.seq, e.type) for e in events] == [(e.seq, e.type) for e in run.events()]


def test_get_run_rebuilds_a_failed_run_with_its_error(file_config, script):
    run = StoredAgent.ask("Refunds?", target=script([{"error": "upstream exploded"}]))

    stored = lg_core.get_run(run.id)

    assert stored.outcome == "failed"
    assert stored.response is None
    assert isinstance(stored.error, ProviderError)
    assert str(stored.error) == "upstream exploded"


def test_get_run_rebuilds_a_pydantic_structured_output(file_config, script):
    value = {"approved": True, "reason": "within 30 days"}
    run = VerdictAgent.ask("Approve?", target=script([{"structured": value}]))
    assert isinstance(run.result.output, Verdict)

    stored = lg_core.get_run(run.id)

    assert stored.result.output == Verdict(**value)
    assert stored.result.structured_result.schema_name == run.result.structured_result.schema_name


def test_reusing_a_run_id_raises_invocation_error_and_keeps_the_first_run(file_config, script):
    first = StoredAgent.ask("Refunds?", target=script(TURNS), run_id="order-481-refund")
    assert first.outcome == "completed"

    with pytest.raises(InvocationError, match="order-481-refund"):
        StoredAgent.ask("Something else", target=script([{"text": "other"}]), run_id="order-481-refund")

    stored = lg_core.get_run("order-481-refund")
    assert stored.response == "Refunds take 30 days."
    assert stored.result.messages[0].text == "Refunds?"


# -- storage per turn ----------------------------------------------------------------------------------


def _turn_bytes(path, run_id):
    """Bytes of message rows and events that each tool turn added, by turn number."""
    with sqlite3.connect(path) as db:
        messages = dict(db.execute("select seq, length(data) from lg_messages where run_id = ?", (run_id,)).fetchall())
        events = db.execute(
            "select type, length(data) from lg_events where run_id = ? order by seq", (run_id,)
        ).fetchall()
        steps = dict(
            db.execute(
                "select key, coalesce(length(input), 0) + coalesce(length(result), 0) + coalesce(length(error), 0) "
                "from lg_steps where run_id = ?",
                (run_id,),
            ).fetchall()
        )
    turns: list[int] = []
    in_tool_turn = False
    for kind, size in events:
        if kind == "tool_call_stop":
            turns.append(0)
            in_tool_turn = True
        if in_tool_turn:
            turns[-1] += size
        if kind == "tool_execution_stop":
            in_tool_turn = False
    for turn in range(len(turns)):
        turns[turn] += messages[1 + 2 * turn] + messages[2 + 2 * turn]
        turns[turn] += sum(size for key, size in steps.items() if key.startswith(f"root/turn-{turn}/"))
    return turns


def test_bytes_stored_per_turn_do_not_grow_with_the_conversation(file_config, script):
    tool_turns = 30
    turns = [
        {
            "tool_calls": [lookup("refunds", f"call_{n:03d}")],
            "usage": {"input_tokens": 100, "output_tokens": 10},
        }
        for n in range(tool_turns)
    ]
    turns.append({"text": "Done.", "usage": {"input_tokens": 100, "output_tokens": 10}})

    run = StoredAgent.ask("Look it up thirty times", target=script(turns))

    assert run.outcome == "completed"
    assert len(run.result.messages) == 2 + 2 * tool_turns
    sizes = _turn_bytes(db_path(file_config), run.id)
    assert len(sizes) == tool_turns
    early, late = sizes[2], sizes[29]
    assert early > 0
    assert late <= early + 16, f"turn 30 stored {late} bytes, turn 3 stored {early}: storage grows with history"

    with sqlite3.connect(db_path(file_config)) as db:
        [(checkpoint_size,)] = db.execute(
            "select length(checkpoint) from lg_frames where run_id = ?", (run.id,)
        ).fetchall()
    assert checkpoint_size < 2000, "the frame checkpoint must not hold the conversation"
