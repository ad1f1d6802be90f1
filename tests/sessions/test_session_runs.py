"""Runs on a session: history and state come from the session, the turn goes back
into it, and runs sharing a session never interleave (embedded mode)."""

from __future__ import annotations

import contextvars
import json
import threading
import time

import pytest

import lg_core
from lg_core import (
    Agent,
    Configuration,
    Hook,
    Message,
    ProtocolError,
    RunStateError,
    SessionActorError,
    before_invocation,
    with_configuration,
)
from lg_core.execution import event_json
from lg_core.session import Session
from lg_core.sessions import FilesystemSessionStore, MemorySessionStore
from tests.sessions import session_app
from tests.sessions.session_app import NoteAgent, RecallAgent


@pytest.fixture(autouse=True)
def _gates():
    session_app.reset()
    yield
    for gate in ("g1", "g2", "g3", "hold"):  # never leave a tool thread blocked
        session_app.release(gate)


def in_thread(target) -> threading.Thread:
    """Start ``target`` on a thread that sees this test's configuration (a context variable)."""
    thread = threading.Thread(target=contextvars.copy_context().run, args=(target,))
    thread.start()
    return thread


def wait_for(probe, timeout: float = 30):
    """Poll ``probe`` until it returns something truthy (a wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"nothing after {timeout} s")


def stored(config, session_id="conv-1", actor_id="user-7"):
    snapshot = config.runtime().session_store.load(session_id, actor_id=actor_id)
    return [] if snapshot is None else [(m.role, m.text) for m in snapshot.messages]


def ask(message, **options):
    options.setdefault("session_id", "conv-1")
    options.setdefault("actor_id", "user-7")
    return RecallAgent.ask(message, **options)


# -- history and state -------------------------------------------------------------------------


def test_a_second_run_continues_the_conversation_of_the_first(config):
    first = ask("My name is Ada.")
    second = ask("What is my name?")

    assert first.response == "seen: My name is Ada."
    assert second.response == "seen: My name is Ada. | What is my name?"
    assert stored(config) == [
        ("user", "My name is Ada."),
        ("assistant", "seen: My name is Ada."),
        ("user", "What is my name?"),
        ("assistant", "seen: My name is Ada. | What is my name?"),
    ]


def test_the_invocation_history_is_only_the_fallback_for_a_new_session(config):
    earlier = [Message(role="user", content="imported from the old system")]

    first = ask("hello", history=earlier)
    second = ask("again", history=[Message(role="user", content="ignored now")])

    assert first.response == "seen: imported from the old system | hello"
    assert second.response == "seen: imported from the old system | hello | again"
    assert stored(config)[0] == ("user", "imported from the old system")


def test_a_session_history_hook_chooses_the_history_and_the_session_keeps_everything():
    class LastTwo(Hook):
        def session_history(self, run, stored, fallback):
            return list(stored[-2:]) if stored else None

    configuration = Configuration(hooks=[LastTwo])
    with with_configuration(configuration):
        for text in ("one", "two", "three"):
            run = ask(text)
        assert run.response == "seen: two | three"
        assert [text for _role, text in stored(configuration)][::2] == ["one", "two", "three"]
    configuration.close()


def test_a_hook_returning_no_list_fails_the_run_with_configuration_error():
    class Broken(Hook):
        def session_history(self, run, stored, fallback):
            return 42

    configuration = Configuration(hooks=[Broken])
    with with_configuration(configuration):
        run = ask("hello")
    configuration.close()
    assert run.failed and isinstance(run.error, lg_core.ConfigurationError)
    assert "session_history must return a list" in str(run.error)


@pytest.mark.parametrize(
    "chosen",
    ["Summary", b"Summary", {"role": "user", "content": "Summary"}, Message(role="user", content="Summary")],
    ids=["str", "bytes", "mapping", "one-message"],
)
def test_a_hook_returning_a_string_or_one_message_is_no_list_either(chosen):
    # Iterable, but not a list of messages: a string would become one user message per character.
    class Broken(Hook):
        def session_history(self, run, stored, fallback):
            return chosen

    configuration = Configuration(hooks=[Broken])
    with with_configuration(configuration):
        run = ask("hello")
        assert stored(configuration) == []
    configuration.close()
    assert run.failed and isinstance(run.error, lg_core.ConfigurationError)
    assert "session_history must return a list" in str(run.error)


def test_state_starts_from_the_session_merged_with_the_invocation_context(config):
    first = NoteAgent.ask("plan=trial", session_id="conv-1", actor_id="user-7", context={"tier": "gold"})
    second = NoteAgent.ask("seat=12", session_id="conv-1", actor_id="user-7", context={"tier": "platinum"})

    assert first.response == 'state: {"plan": "trial", "tier": "gold"}'
    assert second.response == 'state: {"plan": "trial", "seat": "12", "tier": "platinum"}'
    snapshot = config.runtime().session_store.load("conv-1", actor_id="user-7")
    assert snapshot.state == {"plan": "trial", "seat": "12", "tier": "platinum"}


def test_system_transient_and_reasoning_content_never_reach_the_session(config):
    class ContextAgent(RecallAgent):
        @before_invocation
        def add_context(self, payload):
            note = Message(role="user", content="retrieved for this turn", metadata={"transient": True})
            return lg_core.replace({"messages": [*payload["messages"][:-1], note, payload["messages"][-1]]})

    ContextAgent.ask("hello", session_id="conv-1", actor_id="user-7")
    second = ContextAgent.ask("again", session_id="conv-1", actor_id="user-7")

    assert second.response == "seen: hello | retrieved for this turn | again"
    assert stored(config) == [
        ("user", "hello"),
        ("assistant", "seen: retrieved for this turn | hello"),
        ("user", "again"),
        ("assistant", "seen: hello | retrieved for this turn | again"),
    ]
    snapshot = config.runtime().session_store.load("conv-1", actor_id="user-7")
    assert all(block.kind != "reasoning" for m in snapshot.messages for block in m.content)
    assert all(m.role != "system" for m in snapshot.messages)


def test_a_run_naming_another_actors_session_fails_and_leaves_it_unchanged(config):
    ask("I am user seven.", actor_id="user-7")
    before = stored(config)

    for other in ("user-8", None):
        run = ask("Who am I?", actor_id=other)
        assert run.failed and isinstance(run.error, SessionActorError)
        assert run.response is None
        assert "user seven" not in json.dumps([event_json(event) for event in run.events()])
    assert stored(config) == before


@pytest.mark.parametrize("store", ["sql", "memory", "filesystem"])
def test_a_run_whose_session_another_actor_created_meanwhile_fails_and_the_winner_keeps_it(store, tmp_path):
    """Both runs open the new session empty; the one that finishes first owns it."""
    declaration = {"provider": "filesystem", "root": str(tmp_path / "sessions")} if store == "filesystem" else store
    configuration = Configuration(session_store=declaration)
    with with_configuration(configuration):
        held = RecallAgent.start_execution("gate:g1 from seven", session_id="conv-1", actor_id="user-7")
        session_app.wait_until_entered("g1")
        winner = ask("from eight", actor_id="user-8")
        session_app.release("g1")
        loser = held.wait(timeout=30)

        assert winner.response == "seen: from eight"
        assert loser.failed and isinstance(loser.error, SessionActorError)
        assert stored(configuration, actor_id="user-8") == [("user", "from eight"), ("assistant", "seen: from eight")]
        with pytest.raises(SessionActorError):
            stored(configuration, actor_id="user-7")
    configuration.close()


def test_failed_and_cancelled_runs_leave_the_session_unchanged(config, script):
    class Failing(Agent):
        model = script([{"error": {"message": "the provider is down", "kind": "provider"}}])

    class Refusing(RecallAgent):
        @before_invocation
        def refuse(self, payload):
            return lg_core.cancel("not today")

    ask("kept")
    assert Failing.ask("lost", session_id="conv-1", actor_id="user-7").failed
    assert Refusing.ask("refused", session_id="conv-1", actor_id="user-7").cancelled
    assert [text for _role, text in stored(config)] == ["kept", "seen: kept"]
    assert ask("next").response == "seen: kept | next"


def test_a_writer_that_changes_the_session_during_a_run_fails_the_run_instead_of_losing_a_turn(config):
    results = {}
    thread = in_thread(lambda: results.setdefault("run", ask("gate:g1 hello")))
    session_app.wait_until_entered("g1")
    Session("conv-1", actor_id="user-7").append([Message(role="user", content="written by the app meanwhile")])
    session_app.release("g1")
    thread.join(30)

    run = results["run"]
    assert run.failed and isinstance(run.error, ProtocolError)
    assert "another writer changed it first" in str(run.error)
    assert stored(config) == [("user", "written by the app meanwhile")]


def test_sessions_survive_a_new_runtime_on_a_file_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    for text in ("first process", "second process"):
        configuration = Configuration(run_store=url)
        with with_configuration(configuration):
            run = ask(text)
        configuration.close()
    assert run.response == "seen: first process | second process"


@pytest.mark.parametrize("kind", ["memory", "filesystem"])
def test_a_store_outside_the_run_store_gets_the_turn_too(tmp_path, kind):
    store = MemorySessionStore() if kind == "memory" else FilesystemSessionStore(tmp_path / "sessions")
    configuration = Configuration(session_store=store)
    with with_configuration(configuration):
        ask("one")
        run = ask("two")
        results = {}
        thread = in_thread(lambda: results.setdefault("run", ask("gate:g1 three")))
        session_app.wait_until_entered("g1")
        store.append(
            "conv-1",
            messages=[Message(role="user", content="meanwhile")],
            state={},
            metadata={},
            expected_count=4,
            actor_id="user-7",
        )
        session_app.release("g1")
        thread.join(30)
    configuration.close()
    assert run.response == "seen: one | two"
    assert [m.text for m in store.load("conv-1", actor_id="user-7").messages][-1] == "meanwhile"
    assert isinstance(results["run"].error, ProtocolError)


@pytest.mark.parametrize("kind", ["memory", "filesystem"])
def test_the_turn_record_of_a_store_outside_the_run_store_is_not_the_applications_metadata(tmp_path, kind):
    """The record ("lg_turn") holds a copy of the state before the run's turn: it showed in
    Session.metadata, and an application that scrubbed the state kept that copy in the metadata."""
    store = MemorySessionStore() if kind == "memory" else FilesystemSessionStore(tmp_path / "sessions")
    configuration = Configuration(session_store=store)
    with with_configuration(configuration):
        ask("one", context={"ssn": "123-45-6789"})
        ask("two", context={"topic": "refund"})
        session = Session("conv-1", actor_id="user-7", store=store)
        assert dict(session.metadata) == {}
        session.replace(session.history(), state={"topic": "refund"})
    configuration.close()
    scrubbed = store.load("conv-1", actor_id="user-7")
    assert scrubbed.state == {"topic": "refund"}
    assert "123-45-6789" not in json.dumps(scrubbed.metadata)


def test_with_sessions_disabled_runs_share_nothing():
    configuration = Configuration(session_store="none")
    with with_configuration(configuration):
        ask("one")
        assert ask("two").response == "seen: two"
        assert configuration.runtime().session_store is None
    configuration.close()


# -- serialization: runs sharing a session never interleave ------------------------------------------


def steps_of(config, run_id):
    return config.runtime().store.load_steps(run_id)


def assert_in_order(config, *run_ids):
    """Each run's work was committed after the run before it finished.

    (Local steps record no start time; every durable event after
    ``invocation_start`` comes from a commit of the run's own steps.)
    """
    store = config.runtime().store
    for earlier, later in zip(run_ids, run_ids[1:], strict=False):
        finished = store.load_run(earlier).finished_at
        work = [e.created_at for e in store.load_events(later) if e.type != "invocation_start"]
        assert finished is not None and work and min(work) >= finished, (earlier, later)


def test_a_run_started_while_another_is_active_waits_then_sees_its_turn(config):
    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    second = RecallAgent.start_execution("second", session_id="conv-1", actor_id="user-7")
    third = RecallAgent.start_execution("third", session_id="conv-1", actor_id="user-7")

    assert (first.state, second.state, third.state) == ("running", "pending", "pending")
    assert [s.status for s in steps_of(config, second.run_id) if s.kind == "model"] == ["pending"]

    session_app.release("g1")
    runs = [execution.wait(timeout=30) for execution in (first, second, third)]

    assert [run.outcome for run in runs] == ["completed"] * 3
    assert runs[1].response == "seen: gate:g1 first | second"
    assert runs[2].response == "seen: gate:g1 first | second | third"
    assert_in_order(config, first.run_id, second.run_id, third.run_id)
    assert [text for role, text in stored(config) if role == "user"] == ["gate:g1 first", "second", "third"]


def test_ask_waits_for_its_turn_on_the_session(config):
    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    results = {}
    asking = in_thread(lambda: results.setdefault("run", ask("asked meanwhile")))
    [waiting] = wait_for(lambda: config.runtime().store.list_runs(status="pending"))
    assert asking.is_alive(), "ask() returned while the session's earlier run was still active"
    assert waiting.invocation["message"]["content"][0]["text"] == "asked meanwhile"

    session_app.release("g1")
    asking.join(30)
    assert results["run"].response == "seen: gate:g1 first | asked meanwhile"
    assert_in_order(config, first.run_id, results["run"].id)


def test_runs_of_other_sessions_do_not_wait(config):
    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    assert ask("elsewhere", session_id="conv-2").response == "seen: elsewhere"
    assert ask("other actor", session_id="conv-3", actor_id="user-8").response == "seen: other actor"
    assert first.state == "running"
    session_app.release("g1")
    assert first.wait(timeout=30).completed


def test_cancelling_a_waiting_run_ends_it_and_the_next_one_still_runs(config):
    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    second = RecallAgent.start_execution("second", session_id="conv-1", actor_id="user-7")
    third = RecallAgent.start_execution("third", session_id="conv-1", actor_id="user-7")

    second.cancel()
    cancelled = second.wait(timeout=30)
    assert cancelled.cancelled and third.state == "pending"
    assert [e.type for e in cancelled.events()] == ["invocation_start", "run_cancel"]
    assert [s.status for s in steps_of(config, second.run_id) if s.kind == "model"] == ["cancelled"]

    session_app.release("g1")
    assert third.wait(timeout=30).response == "seen: gate:g1 first | third"
    assert first.wait(timeout=30).completed


def test_stopping_a_stream_that_waits_for_its_turn_cancels_the_run(config):
    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    run = RecallAgent.stream_ask("streamed", session_id="conv-1", actor_id="user-7")
    seen = []

    def consume():
        for event in run:
            seen.append(event.type)
            if event.type == "invocation_start":
                run.cancel("the client went away")

    consumer = in_thread(consume)
    consumer.join(30)
    assert not consumer.is_alive()
    assert run.cancelled and seen[-1] == "run_cancel"
    session_app.release("g1")
    assert first.wait(timeout=30).completed
    assert [text for role, text in stored(config) if role == "user"] == ["gate:g1 first"]


def test_a_waiting_run_whose_opening_fails_ends_and_lets_the_next_run_start(config):
    class Refusing(RecallAgent):
        @before_invocation
        def refuse(self, payload):
            raise RuntimeError("refused at opening")

    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    failing = Refusing.start_execution("second", session_id="conv-1", actor_id="user-7")
    third = RecallAgent.start_execution("third", session_id="conv-1", actor_id="user-7")
    session_app.release("g1")

    assert failing.wait(timeout=30).failed
    assert third.wait(timeout=30).response == "seen: gate:g1 first | third"
    assert first.wait(timeout=30).completed


def test_recovery_activates_a_run_whose_predecessor_ended_without_activating_it(config):
    store, engine = config.runtime().store, config.runtime().engine
    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    second = RecallAgent.start_execution("second", session_id="conv-1", actor_id="user-7")
    with store.db.transaction() as tx:  # the run ends outside any commit (an old process, a crash)
        tx.cursor.execute("UPDATE lg_runs SET status = 'failed' WHERE id = ?", (first.run_id,))

    assert store.stalled_sessions() == [("conv-1", "user-7")]
    activation = engine.activate_next_pending("conv-1", "user-7")
    assert (activation.runs, activation.refs) == ((second.run_id,), [])  # a local run: its own thread drives it
    assert second.wait(timeout=30).response == "seen: second"
    assert store.stalled_sessions() == []
    assert engine.activate_next_pending("conv-1", "user-7").runs == ()
    session_app.release("g1")


def test_resuming_a_run_that_still_waits_for_its_session_explains_why_not(config):
    RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    second = RecallAgent.start_execution("second", session_id="conv-1", actor_id="user-7")
    with pytest.raises(RunStateError, match="waits for the earlier runs of session 'conv-1'"):
        lg_core.resume(second.run_id)
    session_app.release("g1")
    assert second.wait(timeout=30).completed


def test_an_interjection_sent_while_a_run_waits_is_read_by_its_first_turn(config):
    first = RecallAgent.start_execution("gate:g1 first", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    second = RecallAgent.start_execution("second", session_id="conv-1", actor_id="user-7")
    second.interject("and one more thing")
    session_app.release("g1")
    assert second.wait(timeout=30).response == "seen: gate:g1 first | second | and one more thing"
    assert first.wait(timeout=30).completed


def test_runs_continue_a_conversation_in_a_store_written_like_the_spec_example():
    from tests.sessions.test_session import MappingStore

    store = MappingStore()
    configuration = Configuration(session_store=store)
    with with_configuration(configuration):
        ask("one")
        run = ask("two")
    configuration.close()
    assert run.response == "seen: one | two"
    assert [m["content"][0]["text"] for m in store.rows[("conv-1", "user-7")]["messages"]] == [
        "one",
        "seen: one",
        "two",
        "seen: one | two",
    ]


def test_a_run_exposes_the_session_it_was_opened_with(config):
    # The spec's Run#session: "Session opened for this invocation, when persistence is configured."
    run = ask("hello")
    session = run.session
    assert isinstance(session, Session)
    assert (session.id, session.actor_id) == ("conv-1", "user-7")
    assert session.store is config.runtime().session_store
    assert [m.text for m in session.history()] == ["hello", "seen: hello"]
    assert run.session is session
    assert lg_core.get_run(run.id).session.id == "conv-1"

    unnamed = RecallAgent.ask("no session id given")
    assert unnamed.session.id == unnamed.invocation.session_id == unnamed.id


def test_a_run_has_no_session_when_sessions_are_disabled():
    configuration = Configuration(session_store="none")
    with with_configuration(configuration):
        assert ask("one").session is None
    configuration.close()


def test_a_dormant_runs_session_follows_the_actor_its_start_decides():
    configuration = Configuration(session_actor=lambda invocation: f"tenant-{invocation.context['tenant']}")
    with with_configuration(configuration):
        run = RecallAgent.stream_ask("hi", session_id="conv-1", context={"tenant": "9"})
        assert run.session.actor_id is None  # not decided before the run starts
        list(run)
        assert run.session.actor_id == "tenant-9"
        assert [m.text for m in run.session.history()] == ["hi", "seen: hi"]
    configuration.close()


def test_a_runs_session_store_calls_run_in_the_runs_operation_context():
    from tests.sessions.test_session import TracingStore

    store = TracingStore()
    configuration = Configuration(session_store=store)
    with with_configuration(configuration):
        run = ask("one")
    configuration.close()
    assert run.completed
    assert store.calls and {operation for _call, operation in store.calls} == {run.operation_id}


class ReadsSessionFirst(Hook):
    """Reads ``run.session`` before the run executes, as an application's hook may."""

    seen: list[int] = []

    def prepare_execution(self, run):
        self.seen.append(len(run.session.history()))
        return run


@pytest.mark.parametrize("kind", ["run store", "memory", "filesystem"])
def test_a_runs_session_read_before_it_ran_holds_its_turn_once_it_completed(tmp_path, kind):
    # Run#session is the "Session opened for this invocation", and a successful write
    # "becomes the checkpoint used by later updates": the run's own turn too.
    stores = {"memory": MemorySessionStore, "filesystem": lambda: FilesystemSessionStore(tmp_path / "sessions")}
    options = {} if kind == "run store" else {"session_store": stores[kind]()}
    ReadsSessionFirst.seen = []
    configuration = Configuration(hooks=[ReadsSessionFirst], **options)
    with with_configuration(configuration):
        NoteAgent.ask("color=blue", session_id="conv-1", actor_id="user-7")
        run = NoteAgent.ask("size=xl", session_id="conv-1", actor_id="user-7")
        assert ReadsSessionFirst.seen == [0, 4]  # user, tool call, tool result, answer

        assert run.session.load() == Session("conv-1", actor_id="user-7").load()  # messages, state, metadata
        assert run.session.state == {"color": "blue", "size": "xl"}
        assert lg_core.get_run(run.id).session.load() == run.session.load()
        run.session.checkpoint_result(run)  # nothing new: the stored history is the run's conversation
        run.session.append([Message(role="user", content="a note")])
        assert ask("next").response == "seen: color=blue | size=xl | a note | next"
    configuration.close()


def test_a_session_read_by_a_hook_during_a_failed_run_stays_usable(script):
    class Failing(Agent):
        model = script([{"error": {"message": "the provider is down", "kind": "provider"}}])

    ReadsSessionFirst.seen = []
    configuration = Configuration(hooks=[ReadsSessionFirst])
    with with_configuration(configuration):
        ask("kept")
        run = Failing.ask("lost", session_id="conv-1", actor_id="user-7")
        assert run.failed and ReadsSessionFirst.seen == [0, 2]
        assert [m.text for m in run.session.history()] == ["kept", "seen: kept"]
        run.session.append([Message(role="user", content="after the failure")])
        assert [text for _role, text in stored(configuration)] == ["kept", "seen: kept", "after the failure"]
    configuration.close()


def test_a_run_handle_that_read_the_session_while_the_run_executed_reads_it_again_once_completed(config):
    execution = RecallAgent.start_execution("gate:g1 hello", session_id="conv-1", actor_id="user-7")
    session_app.wait_until_entered("g1")
    handle = lg_core.get_run(execution.run_id)  # a Run rebuilt from the store: it did not execute the run
    assert handle.session.history() == ()
    session_app.release("g1")
    execution.wait(timeout=30)

    assert handle.refresh().completed
    assert handle.session.load() == Session("conv-1", actor_id="user-7").load()
    handle.session.append([Message(role="user", content="a note")])
    assert stored(config)[-1] == ("user", "a note")
