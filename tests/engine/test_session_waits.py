"""A run waiting for its session's running run, when nothing may ever end that run.

A tool that asks another agent on its own run's session: the inner run waits
for the outer one, which waits for the tool. It hung for good; the inner run
now fails at once. A run that an exception (Ctrl-C in a tool) stopped in this
process: the next run of its session waited in silence; it now says which run
to resume or cancel, and starts once that run ends.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time

import pytest

import lg_core
from lg_core import Agent, Tool
from lg_core.errors import RunStateError
from lg_core.providers import scripted

MODEL = "session-waits"


def _serve(request):
    said = request.messages[-1].text
    if said in ("ask inside", "stop"):
        tool = "ask_same_session" if said == "ask inside" else "interrupt_once"
        return {"tool_calls": [{"name": tool, "arguments": {}}]}
    return {"text": f"answered: {said}"}


class AskSameSessionTool(Tool):
    tool_name = "ask_same_session"
    description = "Asks another agent on this run's own session."
    inner: list[lg_core.Run] = []

    def call(self, input):
        inner = SessionAgent.ask("inner question", session_id=self.run.invocation.session_id, deadline=30)
        AskSameSessionTool.inner.append(inner)
        return inner.outcome


class InterruptOnceTool(Tool):
    tool_name = "interrupt_once"
    description = "Raises KeyboardInterrupt the first time."
    interrupt: list[bool] = []

    def call(self, input):
        if InterruptOnceTool.interrupt:
            InterruptOnceTool.interrupt.pop()
            raise KeyboardInterrupt
        return "went on"


class SessionAgent(Agent):  # module level: resume rebuilds its runs from the import path
    model = f"scripted:{MODEL}"
    tools = [AskSameSessionTool, InterruptOnceTool]


@pytest.fixture(autouse=True)
def _model():
    scripted.register(MODEL, _serve)
    yield
    scripted.unregister(MODEL)


def test_an_agent_a_tool_asks_on_its_own_runs_session_fails_at_once_instead_of_waiting_forever(file_config):
    AskSameSessionTool.inner = []
    outer = SessionAgent.ask("ask inside", session_id="chat-nested")

    [inner] = AskSameSessionTool.inner
    assert inner.outcome == "failed"  # was partial at its deadline: it waited for the outer run
    assert isinstance(inner.error, RunStateError)
    assert f"the run holding it, {outer.id}, started this one" in str(inner.error)
    assert outer.outcome == "completed"


def test_a_run_waiting_behind_one_an_exception_stopped_here_says_so_and_starts_once_it_is_resumed(file_config, caplog):
    InterruptOnceTool.interrupt = [True]
    with pytest.raises(KeyboardInterrupt):
        SessionAgent.ask("stop", session_id="chat-stopped", run_id="stopped-1")
    second: list[lg_core.Run] = []
    ask_next = contextvars.copy_context().run  # the thread asks under the test's configuration
    waiter = threading.Thread(
        target=ask_next, args=(lambda: second.append(SessionAgent.ask("next", session_id="chat-stopped", deadline=60)),)
    )
    with caplog.at_level(logging.WARNING, logger="lg_core"):
        waiter.start()
        deadline = time.monotonic() + 30
        while "stopped in this process by an exception" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
    assert "whose running run stopped-1 was stopped in this process by an exception" in caplog.text
    assert "lg_core.resume('stopped-1') in this process" in caplog.text
    assert waiter.is_alive()  # it still waits: the stopped run is the user's to resume or cancel

    assert lg_core.resume("stopped-1").outcome == "completed"
    waiter.join(30)
    assert [run.outcome for run in second] == ["completed"]
