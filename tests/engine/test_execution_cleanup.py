"""Executions on threads: a run whose work cannot start is closed, and a cleanup failure is not lost."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from lg_core import Agent, Configuration, InvocationError, with_configuration
from lg_core.events import TERMINAL_EVENTS
from lg_core.hooks import Hook


class Broken(Exception):
    pass


def echo_agent(script) -> type[Agent]:
    return type("EchoAgent", (Agent,), {"model": script(lambda request: {"text": "ok"})})


def test_a_cleanup_failure_of_a_background_run_is_raised_by_wait(config, script):
    agent = echo_agent(script)
    run = agent.build_run("Hi")
    run.register(closer=lambda: (_ for _ in ()).throw(OSError("socket already gone")))

    execution = config.runtime().start_execution(run)

    with pytest.raises(OSError, match="socket already gone"):
        execution.wait(timeout=30)
    assert isinstance(execution.error, OSError)
    assert execution.record().status == "completed"  # the run itself completed; its cleanup did not


class FailingStart(Hook):
    closed: list[str] = []

    def prepare_run(self, run):
        run.register(closer=lambda: self.closed.append(run.id))
        return run

    def prepare_execution(self, run):
        raise Broken("the queue is full")


def test_a_run_whose_work_cannot_start_is_closed_before_the_error_is_raised(script):
    FailingStart.closed = []
    configuration = Configuration(hooks=[FailingStart])
    with with_configuration(configuration), pytest.raises(Broken, match="the queue is full"):
        echo_agent(script).start_execution("Hi")
    configuration.close()
    assert len(FailingStart.closed) == 1


def test_a_naive_wait_deadline_is_refused_with_the_aware_form_to_write_instead(config, script):
    """The spec's execution.wait(deadline: Time.now + 30) ports naturally to datetime.now() +
    timedelta(seconds=30), a naive datetime: the refusal says what to write instead."""
    execution = echo_agent(script).start_execution("Hi")
    with pytest.raises(InvocationError, match=r"datetime\.now\(UTC\) \+ timedelta\(seconds=30\)"):
        execution.wait(deadline=datetime.now() + timedelta(seconds=30))
    assert execution.wait(deadline=datetime.now(UTC) + timedelta(seconds=30)).completed


def test_close_takes_a_deadline_like_wait(config, script):
    agent = type("SlowAgent", (Agent,), {"model": script([{"text": "slow answer", "delay": 5}])})
    execution = agent.start_execution("Hi")

    run = execution.close(deadline=datetime.now(UTC) + timedelta(seconds=30))

    assert run.cancelled


def test_the_execution_supervises_the_run_it_started(config, script):
    agent = echo_agent(script)
    run = agent.build_run("Hi")

    execution = config.runtime().start_execution(run)

    assert execution.run is run  # live while it executes
    assert execution.wait(timeout=30) is run
    assert execution.run is run and run.completed and run.response == "ok"
    attached = config.runtime().get_execution(run.id)
    assert attached.run.completed and attached.run.response == "ok"  # another handle reads the store


def test_the_live_run_is_kept_while_the_store_already_says_finished(config, script):
    # The final commit lands before the terminal event gives the live Run its outcome;
    # in that window the handle must still hand out the Run it supervises.
    agent = echo_agent(script)
    run = agent.build_run("Hi")
    committed, release = threading.Event(), threading.Event()

    def hold_terminal_event(event):
        if event.type in TERMINAL_EVENTS.values():
            committed.set()
            release.wait(30)

    config.runtime().engine.bus.subscribe(run.id, hold_terminal_event)
    execution = config.runtime().start_execution(run)
    try:
        assert committed.wait(30)
        assert execution.record().finished and run.outcome is None
        assert execution.run is run
    finally:
        release.set()
    assert execution.wait(timeout=30) is run and run.completed


def test_close_after_the_run_finished_waits_for_its_cleanup_and_returns_the_live_run(config, script):
    agent = echo_agent(script)
    run = agent.build_run("Hi")
    closing, release, closed = threading.Event(), threading.Event(), []

    def slow_closer():
        closing.set()
        release.wait(30)
        closed.append(run.id)

    run.register(closer=slow_closer)
    execution = config.runtime().start_execution(run)
    assert closing.wait(30) and execution.record().finished
    threading.Timer(0.2, release.set).start()

    assert execution.close(timeout=30) is run
    assert closed == [run.id]  # close waited for the shutdown, as the spec says


def test_execution_start_supervises_a_dormant_run_with_an_event_consumer(config, script):
    # The spec's Execution.start(run, &event_consumer).
    from lg_core import Error, Execution, InvocationError

    run = echo_agent(script).build_run("Hi")
    seen: list[str] = []

    execution = Execution.start(run, on_event=lambda event: seen.append(event.type))

    assert execution.wait(timeout=30) is run and run.completed
    assert seen[0] == "invocation_start" and seen[-1] in TERMINAL_EVENTS.values()
    with pytest.raises(Error, match="executes only once"):
        Execution.start(run, on_event=lambda event: seen.append("redirected"))
    assert "redirected" not in seen
    refused = echo_agent(script).build_run("Hi")
    closed = []
    refused.register(closer=lambda: closed.append("connection"))
    with pytest.raises(InvocationError, match="on_event"):
        Execution.start(refused, on_event="not callable")
    assert closed == ["connection"]  # 'If the work cannot start, this method closes run before raising.'


def test_an_execution_still_closing_its_run_here_is_active_not_finished(config, script):
    # The spec: finished? "Indicates that the Execution and all interjection calls have
    # finished"; active? that it "is still active". Closing the run's resources is part of it.
    run = echo_agent(script).build_run("Hi")
    closing, release = threading.Event(), threading.Event()
    run.register(closer=lambda: (closing.set(), release.wait(30)))
    execution = config.runtime().start_execution(run)
    try:
        assert closing.wait(30) and execution.record().finished
        assert (execution.finished, execution.active, execution.state) == (False, True, "running")
    finally:
        release.set()
    execution.wait(timeout=30)
    assert (execution.finished, execution.active, execution.state) == (True, False, "finished")


def test_another_thread_can_wait_while_the_execution_thread_is_being_started(config, script, monkeypatch):
    # The backend registered the run's thread before starting it: a wait from another thread
    # in that window joined a thread not yet started (RuntimeError) instead of waiting.
    from lg_core.engine import background

    runtime = config.runtime()
    backend = runtime.backend
    starting, go, waiter_arrived = threading.Event(), threading.Event(), threading.Event()
    outcome: dict = {}

    class HeldStart(threading.Thread):
        def start(self):
            if self.name.startswith("lg-exec-"):  # the run's execution thread
                starting.set()
                assert go.wait(30)
            super().start()

    class NoticingLock:
        def __init__(self, lock):
            self.lock = lock

        def __enter__(self):
            if threading.current_thread().name == "waiter":
                waiter_arrived.set()
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

    monkeypatch.setattr(background.threading, "Thread", HeldStart)
    monkeypatch.setattr(backend, "_lock", NoticingLock(backend._lock))
    run = echo_agent(script).build_run("Hi")

    def wait_from_elsewhere():
        try:
            outcome["run"] = runtime.get_execution(run.id).wait(timeout=30)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            outcome["error"] = exc

    starter = threading.Thread(target=lambda: outcome.setdefault("execution", runtime.start_execution(run)))
    starter.start()
    assert starting.wait(30)
    waiter = threading.Thread(target=wait_from_elsewhere, name="waiter")
    waiter.start()
    assert waiter_arrived.wait(30)
    go.set()
    starter.join(30)
    waiter.join(30)

    assert "error" not in outcome, outcome.get("error")
    assert outcome["run"].completed and outcome["run"].id == run.id  # another handle reads the store
    assert outcome["execution"].wait(timeout=30) is run and run.completed
