"""ExecutionState: the spec's request-scoped values, carried to every step of a run.

Local runs here (steps on the caller's thread and on the dispatcher's tool
threads, and executions on their own thread); distributed runs, whose state
travels to worker processes as JSON, are in tests/distributed.
"""

from __future__ import annotations

import threading

import pytest

from lg_core import (
    Agent,
    Configuration,
    ExecutionState,
    InvocationError,
    Tool,
    before_model,
    with_configuration,
)
from lg_core.execution_state import applied, restored, stored_form
from lg_core.providers import scripted

SEEN: list[tuple[str, object]] = []


class WhoAskedTool(Tool):
    description = "Report the request id."
    input_schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }

    def call(self, input):
        SEEN.append((f"tool-{input['n']}-{threading.get_ident()}", ExecutionState["request_id"]))
        ExecutionState["request_id"] = "changed by a tool"  # for this step only
        return "ok"


scripted.register(
    "execution-state",
    lambda request: (
        {"text": "done"}
        if any(m.role == "tool" for m in request.messages)
        else {"tool_calls": [{"name": "who_asked", "arguments": {"n": n}} for n in range(3)]}
    ),
)


class WhoAskedAgent(Agent):
    model = "scripted:execution-state"
    tools = [WhoAskedTool]

    @before_model
    def note(self, payload):
        SEEN.append(("before_model", ExecutionState["request_id"]))


@pytest.fixture(autouse=True)
def clean():
    SEEN.clear()
    with ExecutionState.with_({}):  # whatever a test sets stays in it
        yield


def test_values_are_set_read_deleted_and_captured():
    assert ExecutionState["request_id"] is None and "request_id" not in ExecutionState
    ExecutionState["request_id"] = "r-1"
    captured = ExecutionState.capture()
    ExecutionState["request_id"] = "r-2"
    assert captured["request_id"] == "r-1" and ExecutionState["request_id"] == "r-2"
    with pytest.raises(TypeError):
        captured["request_id"] = "r-3"  # a captured state is immutable
    assert ExecutionState.delete("request_id") == "r-2" and ExecutionState.delete("request_id") is None
    assert ExecutionState.get("request_id", "none") == "none"


def test_with_merges_for_the_block_then_restores():
    ExecutionState["tenant"] = "acme"
    with ExecutionState.with_({"request_id": "r-1"}) as state:
        assert dict(state) == {"tenant": "acme", "request_id": "r-1"}
        with ExecutionState.with_({"tenant": "globex"}):
            assert ExecutionState["tenant"] == "globex"
        ExecutionState["inside"] = True
        assert ExecutionState["tenant"] == "acme"
    assert dict(ExecutionState.capture()) == {"tenant": "acme"}


@pytest.mark.parametrize("key", ["", 3, None, ("a",)])
def test_keys_are_non_empty_strings(key):
    with pytest.raises(TypeError, match="non-empty strings"):
        ExecutionState[key] = 1
    with pytest.raises(TypeError, match="non-empty strings"):
        ExecutionState.with_({key: 1}).__enter__()


def test_with_takes_a_mapping():
    with pytest.raises(TypeError, match="mapping"):
        ExecutionState.with_([("a", 1)]).__enter__()


def test_every_step_of_an_ask_sees_the_callers_state_on_any_thread():
    with ExecutionState.with_({"request_id": "req-7"}):
        run = WhoAskedAgent.ask("Who asked?")
    assert run.completed
    assert [value for _where, value in SEEN] == ["req-7"] * 5  # 2 model turns, 3 parallel tool calls
    assert len({where for where, _ in SEEN if where.startswith("tool")}) == 3
    assert ExecutionState["request_id"] is None  # nothing a step set reached the caller


def test_an_execution_keeps_the_state_it_was_started_with():
    gate = threading.Event()

    class GatedAgent(WhoAskedAgent):
        @before_model
        def wait(self, payload):
            gate.wait(30)

    ExecutionState["request_id"] = "at-start"
    execution = GatedAgent.start_execution("Who asked?")
    ExecutionState["request_id"] = "later"
    gate.set()
    assert execution.wait(timeout=30).completed
    assert {value for _where, value in SEEN} == {"at-start"}


def test_a_run_stores_its_json_values_and_a_resumed_handle_gets_them(tmp_path):
    config = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}")
    opaque = object()
    with with_configuration(config), ExecutionState.with_({"request_id": "req-9", "span": opaque}):
        run = WhoAskedAgent.ask("Who asked?")
    record = config.runtime().store.load_run(run.id)
    assert record.execution_state == {"request_id": "req-9"}  # an object JSON cannot hold lives only in memory
    assert run.execution_state["span"] is opaque  # values are not copied
    from lg_core.run import Run

    assert dict(Run.from_record(record, config.runtime()).execution_state) == {"request_id": "req-9"}
    config.close()


def test_a_distributed_run_needs_json_values():
    with pytest.raises(InvocationError, match=r"ExecutionState\['span'\] is a object.*as JSON"):
        stored_form({"request_id": "r", "span": object()}, distributed=True)
    assert stored_form({"request_id": "r", "n": [1, {"a": 2.5}]}, distributed=True) == {
        "request_id": "r",
        "n": [1, {"a": 2.5}],
    }
    assert stored_form({}, distributed=True) is None


def test_applied_is_undone_after_the_block():
    with applied(restored({"request_id": "inside"})):
        assert ExecutionState["request_id"] == "inside"
    assert ExecutionState["request_id"] is None
