"""Working state written by the parallel tool calls of one turn: every call's changes survive.

Each tool call runs on its own copy of ``context.state`` and commits with the
frame's optimistic version, so the second commit of a turn re-runs on the
frame the first one wrote. It must commit only its own changes (keys set,
changed or deleted) on top of that, not its whole copy.

Both calls are made to build their contexts before either commits: the edits
happen before a ``threading.Barrier`` that opens only when every call of the
turn is inside it. No sleeps, no timings.
"""

from __future__ import annotations

import threading

import pytest

from lg_core import Agent, CancelledError, Tool
from lg_core.engine._checkpoint import apply_state_changes

EDIT_SCHEMA = {
    "type": "object",
    "properties": {
        "set": {"type": "object"},
        "delete": {"type": "array", "items": {"type": "string"}},
        "together": {"type": "boolean"},
    },
    "additionalProperties": False,
}


@pytest.fixture(params=["memory", "sqlite_file"])
def any_config(request):
    """The in-memory store and a SQLite file store (a conflicting commit reloads the frame from disk)."""
    return request.getfixturevalue("config" if request.param == "memory" else "file_config")


def edit_tool(barrier: threading.Barrier | None = None) -> type[Tool]:
    class EditTool(Tool):
        tool_name = "edit"
        description = "Set and delete keys of the working state."
        input_schema = EDIT_SCHEMA

        def call(self, input):
            for key, value in input.get("set", {}).items():
                self.context.state[key] = value
            for key in input.get("delete", []):
                del self.context.state[key]
            if input.get("together"):
                barrier.wait()  # every call of the turn has its context before any commits
            return "edited"

    return EditTool


def edit(call_id, together=True, **changes):
    return {"name": "edit", "id": call_id, "arguments": {**changes, "together": together}}


def run_turns(script, tool, *turns):
    class StateAgent(Agent):
        model = script([*({"tool_calls": calls} for calls in turns), {"text": "done"}])
        tools = [tool]

    run = StateAgent.ask("go")
    assert run.outcome == "completed", run.error
    return run


def test_two_parallel_tools_writing_different_keys_both_survive(any_config, script):
    tool = edit_tool(threading.Barrier(2, timeout=30))
    run = run_turns(script, tool, [edit("c1", set={"a": 1}), edit("c2", set={"b": 2})])
    assert dict(run.result.state) == {"a": 1, "b": 2}


def test_three_parallel_tools_writing_different_keys_all_survive(any_config, script):
    tool = edit_tool(threading.Barrier(3, timeout=30))
    calls = [edit(f"c{n}", set={key: n}) for n, key in enumerate("abc")]
    run = run_turns(script, tool, calls)
    assert dict(run.result.state) == {"a": 0, "b": 1, "c": 2}


def test_a_key_deleted_by_one_parallel_tool_stays_deleted(any_config, script):
    tool = edit_tool(threading.Barrier(2, timeout=30))
    run = run_turns(
        script,
        tool,
        [edit("c0", together=False, set={"draft": "x", "kept": True})],
        [edit("c1", delete=["draft"]), edit("c2", set={"b": 2})],
    )
    assert dict(run.result.state) == {"kept": True, "b": 2}


def test_a_parallel_tool_overwrites_a_key_set_by_an_earlier_turn(any_config, script):
    tool = edit_tool(threading.Barrier(2, timeout=30))
    run = run_turns(
        script,
        tool,
        [edit("c0", together=False, set={"plan": "draft", "notes": ["one"]})],
        [edit("c1", set={"plan": "final"}), edit("c2", set={"notes": ["one", "two"]})],
    )
    assert dict(run.result.state) == {"plan": "final", "notes": ["one", "two"]}


def test_the_ending_of_one_parallel_tool_keeps_what_its_sibling_committed(any_config, script):
    """A call that ends the run commits after its sibling: the ending merges, it does not overwrite."""
    barrier = threading.Barrier(2, timeout=30)
    sibling_committed = threading.Event()
    store = any_config.runtime().store
    commit = store.commit

    def watched_commit(step_commit, *now):
        result = commit(step_commit, *now)
        if result.applied and (step_commit.step_key or "").endswith("/tool/c1"):
            sibling_committed.set()
        return result

    class Writer(Tool):
        description = "Write a."

        def call(self, input):
            self.context.state["a"] = 1
            barrier.wait()
            return "written"

    class Quitter(Tool):
        description = "Write b, then stop the run."

        def call(self, input):
            self.context.state["b"] = 2
            barrier.wait()
            assert sibling_committed.wait(30)
            raise CancelledError("stop here")

    class EndingAgent(Agent):
        model = script(
            [
                {
                    "tool_calls": [
                        {"name": "writer", "id": "c1", "arguments": {}},
                        {"name": "quitter", "id": "c2", "arguments": {}},
                    ]
                }
            ]
        )
        tools = [Writer, Quitter]

    store.commit = watched_commit
    try:
        run = EndingAgent.ask("go")
    finally:
        del store.commit  # the instance attribute: the class's method again
    assert run.outcome == "cancelled"
    assert store.load_frame(f"{run.id}/root").checkpoint["state"] == {"a": 1, "b": 2}


# -- the merge rule itself -----------------------------------------------------------------------


def test_apply_state_changes_applies_only_the_steps_own_changes():
    before = {"keep": 1, "gone": 2, "plan": {"step": 1}}
    after = {"keep": 1, "plan": {"step": 2}, "new": 3}  # deleted "gone", changed "plan", added "new"
    current = {"keep": 1, "gone": 2, "plan": {"step": 1}, "sibling": 4}
    assert apply_state_changes(current, before, after) == {"keep": 1, "plan": {"step": 2}, "new": 3, "sibling": 4}
    assert current == {"keep": 1, "gone": 2, "plan": {"step": 1}, "sibling": 4}  # not mutated


def test_apply_state_changes_without_changes_or_without_a_sibling():
    before = {"a": 1}
    current = {"a": 1, "b": 2}
    assert apply_state_changes(current, before, {"a": 1}) is current
    after = {"a": 5}
    assert apply_state_changes(before, before, after) is after
