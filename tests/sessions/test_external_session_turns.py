"""A run's turn in a session store outside the run store (memory, filesystem) is written
before the run's final commit, so the write can outlive that commit: a crash before the
commit (the run is resumed), or a commit refused by a late interjection (the run goes on).
The session still ends with the turn exactly once if the run completes, and unchanged if not."""

from __future__ import annotations

import contextvars
import itertools
import threading

import pytest

import lg_core
from lg_core import Agent, Configuration, Message, ProtocolError, Tool, with_configuration
from lg_core.providers import scripted
from lg_core.session import Session
from lg_core.sessions import MemorySessionStore
from tests.sessions import session_app
from tests.sessions.session_app import NoteAgent, RecallAgent


class Lookup(Tool):
    tool_name = "lookup"
    description = "Look something up."
    input_schema = {"type": "object", "properties": {}}

    def call(self, input):
        return "found"


class Crash(BaseException):
    """The process dies here."""


_answers = itertools.count(1)


def _look_then_answer(request):
    """Calls ``lookup`` for each user message, then answers; a real model does not answer
    twice with the same words, so neither does this one."""
    if request.messages[-1].role == "user":
        return {"tool_calls": [{"name": "lookup", "arguments": {}}]}
    return {"text": f"answer #{next(_answers)}"}


scripted.register("external-session-lookup", _look_then_answer)


class Looker(Agent):  # at module level: a resumed run imports its agent
    model = "scripted:external-session-lookup"
    tools = [Lookup]


def crash_before_final_commit(tmp_path, agent, message, **options):
    """Run ``agent`` on a filesystem session until its final commit, which never happens."""
    first = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}", session_store=files(tmp_path))
    with with_configuration(first):
        store = first.runtime().store
        real_commit = store.commit

        def crashing_commit(commit, *now):
            if commit.finish is not None:
                raise Crash()  # the session file is written; the run's final commit never happens
            return real_commit(commit, *now)

        store.commit = crashing_commit
        with pytest.raises(Crash):
            agent.ask(message, run_id="r-crash", session_id="conv-1", actor_id="user-7", **options)
    first.close()


def files(tmp_path):
    return {"provider": "filesystem", "root": str(tmp_path / "sessions")}


def in_new_process(tmp_path, action):
    """``action(config)`` in a fresh runtime on the same stores; returns it and the session afterwards."""
    config = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}", session_store=files(tmp_path))
    with with_configuration(config):
        result = action(config)
        snapshot = config.runtime().session_store.load("conv-1", actor_id="user-7")
    config.close()
    return result, snapshot


def texts(snapshot):
    return [(m.role, m.text) for m in snapshot.messages]


@pytest.fixture(autouse=True)
def _gates():
    session_app.reset()
    yield
    session_app.release("g1")


# -- a crash between the session write and the run's final commit ---------------------------


def test_a_single_turn_run_resumed_after_a_crash_adds_its_turn_once(tmp_path):
    in_new_process(tmp_path, lambda _: RecallAgent.ask("earlier", session_id="conv-1", actor_id="user-7"))
    crash_before_final_commit(tmp_path, RecallAgent, "hello")

    run, snapshot = in_new_process(tmp_path, lambda _: lg_core.resume("r-crash"))

    assert run.completed and run.response == "seen: earlier | hello"  # its own turn was not history
    assert texts(snapshot) == [
        ("user", "earlier"),
        ("assistant", "seen: earlier"),
        ("user", "hello"),
        ("assistant", "seen: earlier | hello"),
    ]


def test_a_multi_turn_run_resumed_after_a_crash_replaces_the_turn_it_wrote(tmp_path):
    crash_before_final_commit(tmp_path, Looker, "hello")
    written = in_new_process(tmp_path, lambda _: None)[1].messages[-1].text

    run, snapshot = in_new_process(tmp_path, lambda _: lg_core.resume("r-crash"))

    assert run.completed, run.error
    assert [m.role for m in snapshot.messages] == ["user", "assistant", "tool", "assistant"]
    assert snapshot.messages[-1].text != written  # the resumed turn's own answer, not the lost one


def test_a_run_ended_after_a_crash_restores_the_session_and_its_state(tmp_path):
    in_new_process(tmp_path, lambda _: NoteAgent.ask("colour=blue", session_id="conv-1", actor_id="user-7"))
    crash_before_final_commit(tmp_path, NoteAgent, "colour=red")

    ended, snapshot = in_new_process(
        tmp_path, lambda config: config.runtime().engine.end_run("r-crash", "cancelled", None)
    )

    assert ended
    assert [m.text for m in snapshot.messages if m.role == "user"] == ["colour=blue"]
    assert snapshot.state == {"colour": "blue"} and "lg_turn" not in snapshot.metadata


# -- a late interjection refuses the final commit after the session write ----------------------


def interject_after_first_write(config, run_id):
    """Add an interjection just after the run's first session write, before its final commit."""
    engine = config.runtime().engine
    original = engine.sessions.write_external
    written = []

    def write_then_interject(write_run_id, write):
        original(write_run_id, write)
        if not written:  # a web request adds an interjection now, just before the run's final commit
            written.append([m.text for m in write.messages])
            config.runtime().store.add_interjection(run_id, Message(role="user", content="one more thing").to_dict())

    engine.sessions.write_external = write_then_interject
    return written


def test_a_run_that_fails_after_a_late_interjection_leaves_the_session_unchanged(script):
    store = MemorySessionStore()
    store.append(
        "conv-1",
        messages=[Message(role="user", content="kept")],
        state={"k": 1},
        metadata={"m": 2},
        expected_count=0,
        actor_id="user-7",
    )
    config = Configuration(session_store=store)
    with with_configuration(config):
        agent = type(
            "Failing",
            (Agent,),
            {
                "model": script(
                    [{"text": "first answer"}, {"error": {"message": "the provider is down", "kind": "provider"}}]
                )
            },
        )
        written = interject_after_first_write(config, "r-race")
        run = agent.ask("hello", run_id="r-race", session_id="conv-1", actor_id="user-7")
    config.close()

    assert written == [["hello", "first answer"]]  # the turn was written, then the commit refused
    assert run.failed
    snapshot = store.load("conv-1", actor_id="user-7")
    assert texts(snapshot) == [("user", "kept")] and snapshot.state == {"k": 1} and snapshot.metadata == {"m": 2}


def test_a_run_that_completes_after_a_late_interjection_writes_its_whole_turn_once(script):
    store = MemorySessionStore()
    config = Configuration(session_store=store)
    with with_configuration(config):
        agent = type("Answering", (Agent,), {"model": script([{"text": "first answer"}, {"text": "second answer"}])})
        written = interject_after_first_write(config, "r-race")
        run = agent.ask("hello", run_id="r-race", session_id="conv-1", actor_id="user-7")
    config.close()

    assert written and run.completed
    assert texts(store.load("conv-1", actor_id="user-7")) == [
        ("user", "hello"),
        ("assistant", "first answer"),
        ("user", "one more thing"),
        ("assistant", "second answer"),
    ]


# -- another writer is still another writer -------------------------------------------------------


def test_an_app_append_that_keeps_a_runs_turn_record_still_conflicts_with_the_next_run():
    """Session.append copies the metadata, lg_turn included; the run's turn is then not its latest write."""
    store = MemorySessionStore()
    config = Configuration(session_store=store)
    with with_configuration(config):
        RecallAgent.ask("one", session_id="conv-1", actor_id="user-7")
        results = {}
        thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(
                lambda: results.setdefault(
                    "run", RecallAgent.ask("gate:g1 two", run_id="r-2", session_id="conv-1", actor_id="user-7")
                ),
            ),
        )
        thread.start()
        session_app.wait_until_entered("g1")
        Session("conv-1", actor_id="user-7").append([Message(role="user", content="meanwhile")])
        session_app.release("g1")
        thread.join(30)
    config.close()

    assert isinstance(results["run"].error, ProtocolError)
    assert "another writer changed it first" in str(results["run"].error)
    assert [m.text for m in store.load("conv-1", actor_id="user-7").messages] == ["one", "seen: one", "meanwhile"]
