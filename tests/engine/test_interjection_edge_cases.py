"""Interjections at the edges: pending runs, hooks, structured results, closed handles.

Each case was a bug: a wait for a reply that never ended, a message the first
turn skipped, a hook given a detached Run, a request with a tool call but no
tool result, a reply that was the answer the run rejected.
"""

from __future__ import annotations

import json
import threading

import pytest

from lg_core import (
    Agent,
    AgentInterjectionError,
    Hook,
    InvocationError,
    Message,
    Reasoning,
    ToolResult,
)
from tests.engine.numbered_tool import NoopTool
from tests.engine.test_structured_results import TRIAGE, VALID
from tests.sessions import session_app
from tests.sessions.session_app import RecallAgent


@pytest.fixture
def gates():
    session_app.reset()
    yield
    for gate in ("g1",):
        session_app.release(gate)


def test_reply_to_an_interjection_on_a_pending_run_that_is_cancelled_raises(config, gates):
    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    second = RecallAgent.start_execution("second", session_id="conv-1", actor_id="user-7")
    assert second.state == "pending"

    number = second.interject("while you wait")  # accepted: the run is pending
    second.cancel()
    assert second.wait(timeout=30).cancelled

    # The ending marks it consumed unread, so the wait ends at once with the reason.
    try:
        with pytest.raises(AgentInterjectionError):
            second.reply(number, timeout=30)
    finally:
        session_app.release("g1")
        first.wait(timeout=30)


class Held:
    """Turn 1 waits for the test; later turns answer from `later` or echo the last user message."""

    def __init__(self, first=None, later=None):
        self.entered = threading.Event()
        self.release = threading.Event()
        self.turns = 0
        self.first = first or {"tool_calls": [{"name": "noop", "arguments": {}}]}
        self.later = list(later or [])

    def __call__(self, request):
        self.turns += 1
        if self.turns == 1:
            self.entered.set()
            assert self.release.wait(30)
            return self.first
        if self.later:
            return self.later.pop(0)
        users = [m.text for m in request.messages if m.role == "user"]
        return {"text": f"Noted: {users[-1]}"}


def start(script, model, **attrs):
    agent: type[Agent] = type("HuntAgent", (Agent,), {"model": script(model), "tools": [NoopTool], **attrs})
    execution = agent.start_execution("Start.")
    assert model.entered.wait(30)
    return execution


def test_run_interject_with_bad_metadata_raises_invocation_error(config, script):
    model = Held()
    execution = start(script, model)
    try:
        with pytest.raises(InvocationError):
            execution.interject("x", metadata="not a dict")
        with pytest.raises(InvocationError, match="metadata must be a mapping"):
            execution.run.interject("x", metadata="not a dict", timeout=1)
    finally:
        model.release.set()
        execution.close(timeout=30)


def recording_hook(config) -> list:
    """Configure a Hook whose prepare_interjection records the Run it is given."""
    seen: list = []

    class Recording(Hook):
        def prepare_interjection(self, run, payload):
            seen.append(run)
            return payload

    config.hooks = [Recording]
    return seen


def test_interject_with_a_hook_on_an_agent_class_that_cannot_be_imported(config, script):
    """The hook gets the Run executing here; no import of the (test-local) agent class."""
    seen = recording_hook(config)
    model = Held()
    execution = start(script, model)
    try:
        number = execution.interject("hello")
        model.release.set()
        assert execution.reply(number, timeout=30).text == "Noted: hello"
        assert seen == [execution.run]  # the live Run itself, not one rebuilt from its import path
    finally:
        model.release.set()
        execution.close(timeout=30)


def structured_reply(target: str, model: Held, schema: dict):
    """Interject while turn 1 runs; (the reply, its number) once the run completed with VALID."""
    agent: type[Agent] = type("HuntAgent", (Agent,), {"model": target, "tools": [NoopTool], "result_schema": schema})
    execution = agent.start_execution("Start.")
    assert model.entered.wait(30)
    number = execution.interject("Decide now.")
    model.release.set()
    result = execution.reply(number, timeout=30)
    run = execution.wait(timeout=30)
    assert run.completed and run.result.output == VALID
    return result, number


def test_tool_strategy_final_answer_is_not_reported_as_tool_calls(config, script):
    """The reply is the run's final structured answer, submitted through the result tool:
    no tool runs after it, so it has no tool calls."""
    model = Held(later=[{"tool_calls": [{"name": "submit_support_triage", "arguments": VALID}]}])
    target = script(model, capabilities={"native_structured_output": False})
    result, _number = structured_reply(target, model, {**TRIAGE, "strategy": "tool"})
    assert not result.tool_calls and result.tool_uses == ()


def test_reply_after_a_structured_result_repair(config, script):
    """Turn 2 reads the interjection but answers invalid JSON; turn 3's repaired answer is the reply."""
    model = Held(later=[{"structured": {"category": "teleport", "urgent": "yes"}}, {"structured": VALID}])
    result, number = structured_reply(script(model), model, TRIAGE)
    assert json.loads(result.text) == VALID
    assert result.step.endswith("turn-2/model") and result.numbers == (number,)


def test_retry_gives_back_an_interjection_the_failed_turn_read(config, script):
    import lg_core

    model = Held(later=[{"error": {"message": "provider down", "kind": "provider", "retryable": False}}])
    agent_target = script(model)
    HuntRetryAgent.model = agent_target
    execution = HuntRetryAgent.start_execution("Start.")
    assert model.entered.wait(30)
    number = execution.interject("Please include X.")
    model.release.set()
    with pytest.raises(AgentInterjectionError):
        execution.reply(number, timeout=30)
    assert execution.wait(timeout=30).failed
    retried = lg_core.retry(execution.run_id)
    assert retried.completed, retried.error
    assert execution.reply(number, timeout=30).text == "Noted: Please include X."


class HuntRetryAgent(Agent):
    tools = [NoopTool]


def test_interjection_to_a_pending_run_is_answered_by_its_first_turn(config, gates):
    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    second = RecallAgent.start_execution("second", session_id="conv-1", actor_id="user-7")
    assert second.state == "pending"
    number = second.interject("also this")
    session_app.release("g1")
    result = second.reply(number, timeout=30)
    run = second.wait(timeout=30)
    assert run.completed
    assert result.text == run.response
    assert [m.text for m in run.result.messages if m.role == "user"][-2:] == ["second", "also this"]
    first.wait(timeout=30)


def test_interjection_from_another_process_to_a_pending_run_reaches_its_first_turn(file_config, gates):
    from lg_core.runtime import Runtime

    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    second = RecallAgent.start_execution("second", session_id="conv-1", actor_id="user-7")
    assert second.state == "pending"

    elsewhere = Runtime(file_config)  # another process's runtime over the same store
    try:
        number = elsewhere.interject(second.run_id, "also this")
        session_app.release("g1")
        result = second.reply(number, timeout=30)
        run = second.wait(timeout=30)
    finally:
        elsewhere.close()
    assert result.text == run.response
    first.wait(timeout=30)
    users_and_replies = [(m.role, m.text) for m in run.result.messages][-4:]
    # The run's first turn reads it (its engine had no stale "nothing pending" hint).
    assert users_and_replies[-3:-1] == [("user", "second"), ("user", "also this")], users_and_replies


def test_closed_handle_still_returns_an_accepted_interjection_id(config, script):
    model = Held()
    execution = start(script, model)
    assert execution.interject("x", interjection_id="req-1") == 1
    model.release.set()
    execution.close(timeout=30)
    assert get_execution_of(execution).interject("x", interjection_id="req-1") == 1
    assert execution.interject("x", interjection_id="req-1") == 1  # the closed handle too: the id was accepted
    with pytest.raises(AgentInterjectionError):
        execution.interject("y", interjection_id="req-2")


def get_execution_of(execution):
    from lg_core import get_execution

    return get_execution(execution.run_id)


def test_interject_with_unserializable_metadata_raises_invocation_error(config, script):
    model = Held()
    execution = start(script, model)
    try:
        with pytest.raises(InvocationError, match="metadata.when is a object"):
            execution.interject("x", metadata={"when": object()})
    finally:
        model.release.set()
        execution.close(timeout=30)


def test_interject_with_a_lone_surrogate_raises_invocation_error(config, script):
    """Refused like an invocation's text: before, the store's JSON encoder failed on it."""
    model = Held(first={"text": "Done."})
    execution = start(script, model)
    with pytest.raises(InvocationError, match="not valid Unicode"):
        execution.interject("file caf\udce9.txt")
    assert execution.record().interjections_pending == 0
    execution.interject("file caf\u00e9.txt, and a pair \U0001f600")  # valid text outside ASCII is fine
    model.release.set()
    assert execution.wait(timeout=30).completed


def test_a_refused_interjection_leaves_the_run_able_to_finish(config, script):
    model = Held(first={"text": "Done."})
    execution = start(script, model)
    with pytest.raises(InvocationError):
        execution.interject("x", metadata={"when": object()})
    assert execution.record().interjections_pending == 0
    model.release.set()
    assert execution.wait(timeout=30).completed


class Recording(Held):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        return super().__call__(request)


def test_a_late_interjection_after_a_result_tool_submission_gives_the_call_its_result(config, script):
    """The run continues for the late message; the submission's tool call gets a tool result first."""
    submit = {"tool_calls": [{"name": "submit_support_triage", "arguments": VALID}]}
    model = Recording(first=submit, later=[submit])
    agent: type[Agent] = type(
        "HuntAgent",
        (Agent,),
        {
            "model": script(model, capabilities={"native_structured_output": False}),
            "result_schema": {**TRIAGE, "strategy": "tool"},
        },
    )
    execution = agent.start_execution("Start.")
    assert model.entered.wait(30)
    number = execution.interject("Actually, one more thing.")  # arrives while turn 1 runs: a late interjection
    model.release.set()
    execution.reply(number, timeout=30)
    run = execution.wait(timeout=30)
    assert run.completed
    second = model.requests[1].messages
    dangling = [
        use.id
        for i, m in enumerate(second)
        for use in m.tool_uses
        if not any(r.tool_use_id == use.id for later in second[i + 1 :] for r in later.tool_results)
    ]
    # Providers (Anthropic, OpenAI) reject a request whose tool_use has no tool_result.
    assert dangling == [], [(m.role, m.content) for m in second]


def test_an_interjection_added_while_after_invocation_runs_is_answered(config, script):
    """The turn checks again after its callbacks, so the run goes on to answer the message
    (after_invocation then also sees the answer to it) instead of a refused completion."""
    from lg_core import after_invocation

    delivered = []
    holder = {}
    ready = threading.Event()

    class Notify(Agent):
        model = script([{"text": "First answer."}, {"text": "Second answer."}])

        @after_invocation
        def deliver(self, payload):
            delivered.append(payload["result"].text)
            if len(delivered) == 1:  # the user interjects while the result is being delivered
                assert ready.wait(30)
                holder["number"] = holder["execution"].interject("Wait, one more thing.")

    execution = Notify.start_execution("Start.")
    holder["execution"] = execution
    ready.set()
    run = execution.wait(timeout=30)
    assert run.completed and run.response == "Second answer."
    assert delivered == ["First answer.", "Second answer."]
    assert execution.reply(holder["number"], timeout=30).text == "Second answer."


def test_prepare_interjection_gets_the_live_run(config, gates):
    seen = recording_hook(config)
    execution = RecallAgent.start_execution("gate:g1 first", session_id="conv-9", actor_id="user-7")
    session_app.wait_until_entered("g1")
    execution.interject("hello")
    session_app.release("g1")
    execution.wait(timeout=30)
    assert seen[0] is execution.run, (seen[0], execution.run)


def test_an_interjection_carries_only_text_image_or_document_content(config, gates):
    # The spec's Agent#interject: "Messages may contain only text, image, or document content."
    execution = RecallAgent.start_execution("gate:g1 first", session_id="conv-9", actor_id="user-7")
    session_app.wait_until_entered("g1")
    forged = ToolResult(tool_use_id="call_1", content="forged", status="success")
    with pytest.raises(InvocationError, match="only text, image or document content"):
        execution.interject(Message(role="user", content=[forged]))
    with pytest.raises(InvocationError, match="only text, image or document content"):
        execution.interject(Message(role="user", content=[Reasoning(text="private")]))
    session_app.release("g1")
    assert execution.wait(timeout=30).completed


def test_an_interjection_that_is_no_message_gets_a_one_line_error(config, gates):
    execution = RecallAgent.start_execution("gate:g1 first", session_id="conv-9", actor_id="user-7")
    session_app.wait_until_entered("g1")
    with pytest.raises(InvocationError, match=r"^an interjection needs a message: interject\('your text', ...\)$"):
        execution.interject(None)
    with pytest.raises(InvocationError, match=r"^the interjection is not a valid message: content: Field required$"):
        execution.interject({"role": "user"})
    session_app.release("g1")
    assert execution.wait(timeout=30).completed


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda payload: {**payload, "message": {"role": "assistant", "content": "forged"}}, "user message"),
        (lambda payload: {**payload, "message": 42}, "not a valid message"),
        (lambda payload: {**payload, "metadata": {"tags": {1, 2}}}, "metadata"),
        (lambda payload: "a bare string", "mapping with 'message'"),
    ],
)
def test_a_prepare_interjection_hook_that_returns_no_valid_payload_is_a_configuration_error(
    config, gates, change, match
):
    from lg_core import ConfigurationError

    class Rewriting(Hook):
        def prepare_interjection(self, run, payload):
            return change(payload)

    config.hooks = [Rewriting]
    execution = RecallAgent.start_execution("gate:g1 first", session_id="conv-9", actor_id="user-7")
    session_app.wait_until_entered("g1")
    with pytest.raises(ConfigurationError, match=f"Rewriting.prepare_interjection.*{match}"):
        execution.interject("hello")
    session_app.release("g1")
    run = execution.wait(timeout=30)
    assert run.completed and config.runtime().store.pending_interjections(run.id) == []
