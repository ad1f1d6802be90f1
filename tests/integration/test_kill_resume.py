"""A run killed with SIGKILL mid-tool-call resumes in another process
without re-running any tool call that committed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import lg_core
from lg_core import Configuration, with_configuration

HERE = Path(__file__).parent
pytestmark = pytest.mark.chaos


@pytest.fixture(autouse=True)
def _importable_app(monkeypatch):
    """kill_app must be importable here too: resume imports the run's agent class."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.delenv("HANG_AT", raising=False)
    monkeypatch.setenv("KILL_APP_LOG", os.devnull)


CHILD = """
import sys
import lg_core
lg_core.configure(run_store=sys.argv[1])
import kill_app
getattr(kill_app, sys.argv[2]).ask("Record every step.", run_id=sys.argv[3])
"""


def _start_hanging(tmp_path: Path, agent: str, run_id: str, hang_at: int) -> tuple[subprocess.Popen, str, Path]:
    """Start the run in a child process and return once it hangs inside tool call ``hang_at``."""
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    log, ready = tmp_path / "calls.log", tmp_path / "ready"
    env = {
        **os.environ,
        "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "KILL_APP_LOG": str(log),
        "KILL_APP_READY": str(ready),
        "HANG_AT": str(hang_at),
    }
    child = subprocess.Popen([sys.executable, "-c", CHILD, store, agent, run_id], env=env)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert child.poll() is None, f"the child exited early with {child.returncode}"
        assert time.monotonic() < deadline, "the child never reached the hanging tool call"
        time.sleep(0.02)
    os.environ["KILL_APP_LOG"] = str(log)  # the resuming process (this one) logs to the same file
    return child, store, log


def _start_and_kill(tmp_path: Path, agent: str, run_id: str, hang_at: int) -> tuple[str, Path]:
    child, store, log = _start_hanging(tmp_path, agent, run_id, hang_at)
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    return store, log


def _calls(log: Path) -> Counter:
    return Counter(int(line.split()[0]) for line in log.read_text().splitlines())


def _keys(log: Path) -> dict[int, set[str]]:
    keys: dict[int, set[str]] = {}
    for line in log.read_text().splitlines():
        n, key = line.split()
        keys.setdefault(int(n), set()).add(key)
    return keys


def _assert_gapless(run) -> list[str]:
    events = run.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return [e.type for e in events]


def test_killed_run_resumes_without_rerunning_committed_tool_calls(tmp_path):
    store, log = _start_and_kill(tmp_path, "StepAgent", "crash-steps", hang_at=4)
    config = Configuration(run_store=store)
    with with_configuration(config):
        record = lg_core.list_runs(status="running")[0]
        assert record.id == "crash-steps"
        steps = {s.key: s.status for s in config.runtime().store.load_steps("crash-steps")}
        committed = [k for k, status in steps.items() if "/tool/" in k and status == "succeeded"]
        assert len(committed) == 4, steps

        run = lg_core.resume("crash-steps")

        assert run.completed, run.error
        assert run.response == "All steps recorded."
        counts = _calls(log)
        assert counts == Counter({0: 1, 1: 1, 2: 1, 3: 1, 4: 2, 5: 1, 6: 1, 7: 1})
        assert all(len(keys) == 1 for keys in _keys(log).values()), "idempotency keys must be stable"
        types = _assert_gapless(run)
        assert types.count("run_resumed") == 1 and types[-1] == "run_stop"
        assert lg_core.get_run("crash-steps").outcome == "completed"
    config.close()


def test_at_most_once_tool_is_never_run_twice(tmp_path):
    store, log = _start_and_kill(tmp_path, "ChargeAgent", "crash-charge", hang_at=2)
    config = Configuration(run_store=store)
    with with_configuration(config):
        run = lg_core.resume("crash-charge")

        assert run.completed, run.error
        assert _calls(log) == Counter({n: 1 for n in range(8)})
        types = _assert_gapless(run)
        assert types.count("tool_outcome_unknown") == 1
        tool_messages = [m for m in run.result.messages if m.role == "tool"]
        unknown = tool_messages[2].tool_results[0]
        assert unknown.status == "error" and "outcome of this tool call is unknown" in unknown.text
    config.close()


def test_state_of_parallel_tool_calls_survives_a_kill_and_resume(tmp_path):
    """Both parallel calls of turn 0 keep their keys; the resumed turn's call adds one and deletes one."""
    store, log = _start_and_kill(tmp_path, "NoteAgent", "crash-notes", hang_at=2)
    config = Configuration(run_store=store)
    with with_configuration(config):
        frame = config.runtime().store.load_frame("crash-notes/root")
        assert frame.checkpoint["state"] == {"a": 0, "b": 1}

        run = lg_core.resume("crash-notes")

        assert run.completed, run.error
        assert _calls(log) == Counter({0: 1, 1: 1, 2: 2})
        assert dict(run.result.state) == {"b": 1, "c": 2}
    config.close()


def test_resume_refuses_a_run_whose_process_is_alive(tmp_path):
    child, store, _log = _start_hanging(tmp_path, "StepAgent", "alive-run", hang_at=1)
    try:
        config = Configuration(run_store=store)
        with with_configuration(config):
            with pytest.raises(lg_core.RunStateError, match="looks alive"):
                lg_core.resume("alive-run")
        config.close()
    finally:
        child.kill()
        child.wait()


def test_resume_of_finished_or_unknown_runs(file_config, script):
    from lg_core import Agent

    class IdleAgent(Agent):
        model = script([{"text": "hi"}])

    run = IdleAgent.ask("hello")
    again = lg_core.resume(run.id)  # finished runs load; nothing executes again
    assert again.completed and again.response == "hi"
    assert [e.type for e in again.events()].count("run_stop") == 1
    with pytest.raises(lg_core.RunNotFoundError):
        lg_core.resume("no-such-run")
