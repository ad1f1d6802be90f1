"""Runs sharing a session, started from different processes onto real workers, never interleave.

Real PostgreSQL, Redis and `celery worker` processes. SessionAgent passes
one gate per run (gate n for a run shown n user messages) and then answers
with every user message it saw, so a run's answer proves which history it
received; holding gate 1 (a file) keeps the first run in the middle of its
turn for as long as the test needs, without sleeping.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import dist_app
import pytest

from lg_core import get_execution
from lg_core.sessions import SqlSessionStore

START = r"""
import sys
import dist_app

for text in sys.argv[3:]:
    execution = dist_app.SessionAgent.start_execution(text, session_id=sys.argv[1], actor_id=sys.argv[2])
    print(execution.run_id, execution.state, flush=True)
"""


def start_elsewhere(dist, *texts: str, session_id: str = "conv-42", actor_id: str = "user-7") -> subprocess.Popen:
    """Another process that starts runs on the session and prints "<run id> <state>" per run."""
    argv = [sys.executable, "-c", START, session_id, actor_id, *texts]
    return subprocess.Popen(argv, env=dist.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def started(process: subprocess.Popen) -> list[tuple[str, str]]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return [tuple(line.split()) for line in out.splitlines()]


def intervals(store, run_ids):
    """Per run: (first step claimed, run finished), from the store's own timestamps."""
    spans = []
    for run_id in run_ids:
        steps = [s for s in store.load_steps(run_id) if s.kind in ("model", "tool")]
        spans.append(
            (min(s.started_at for s in steps), max(s.finished_at for s in steps), store.load_run(run_id).finished_at)
        )
    return spans


def assert_never_interleaved(store, run_ids):
    """In activation order, each run's first step was claimed after the previous run had finished."""
    spans = sorted(intervals(store, run_ids))
    for (_start, last_step, finished), (next_start, _next_last, _next_finished) in zip(spans, spans[1:], strict=False):
        assert last_step <= finished <= next_start, spans


def session_turns(dist, session_id="conv-42", actor_id="user-7"):
    store = SqlSessionStore(dist.pg_url)
    try:
        return [(m.role, m.text) for m in store.load(session_id, actor_id=actor_id).messages]
    finally:
        store.close()


def test_runs_on_one_session_from_different_processes_never_interleave(dist):
    dist.start_workers(pool="threads", concurrency=8)
    (dist.ready_dir / "hold-1").touch()

    first = dist_app.SessionAgent.start_execution("first question", session_id="conv-42", actor_id="user-7")
    dist.wait_for_hang("gate-1")  # the first run is in the middle of its turn, on a worker
    # Two more processes start runs on the same session at the same time.
    elsewhere = [start_elsewhere(dist, "second question"), start_elsewhere(dist, "third question")]
    others = [started(process)[0] for process in elsewhere]
    assert [state for _run_id, state in others] == ["pending", "pending"]
    assert get_execution(first.run_id).state == "running"

    (dist.ready_dir / "hold-1").unlink()
    runs = [get_execution(run_id).wait(timeout=90) for run_id in [first.run_id] + [run_id for run_id, _ in others]]

    assert [run.outcome for run in runs] == ["completed"] * 3, [run.error for run in runs]
    store = dist.config.runtime().store
    assert_never_interleaved(store, [run.id for run in runs])
    # Each run saw every earlier run's turn: the answers grow by one question per run.
    answers = sorted(run.response for run in runs)
    assert answers[0] == "seen: first question"
    assert answers[1] in ("seen: first question | second question", "seen: first question | third question")
    assert answers[2].startswith(answers[1]) and answers[2].count("|") == 2
    # The session holds whole turns, one after another, in the order the runs ran.
    turns = session_turns(dist)
    assert [role for role, _text in turns] == ["user", "assistant", "tool", "assistant"] * 3
    assert [text for role, text in turns if role == "assistant" and text.startswith("seen:")] == answers
    assert [n for tool, n, _key in dist.calls() if tool == "gate"] == [1, 2, 3]


def test_runs_started_at_once_from_two_processes_each_see_all_earlier_turns(dist):
    dist.start_workers(pool="threads", concurrency=8)

    racers = [start_elsewhere(dist, "a1", "a2"), start_elsewhere(dist, "b1", "b2")]
    run_ids = [run_id for process in racers for run_id, _state in started(process)]
    runs = [get_execution(run_id).wait(timeout=90) for run_id in run_ids]

    assert [run.outcome for run in runs] == ["completed"] * 4, [run.error for run in runs]
    assert_never_interleaved(dist.config.runtime().store, run_ids)
    answers = sorted((run.response for run in runs), key=len)
    for shown, answer in enumerate(answers, start=1):  # the k-th run to execute saw k user messages
        assert answer.count("|") == shown - 1, answers
        if shown > 1:
            assert answer.startswith(answers[shown - 2]), answers
    assert [text for role, text in session_turns(dist) if role == "user"] == answers[-1][len("seen: ") :].split(" | ")


@pytest.mark.chaos
def test_a_pool_child_killed_in_the_middle_of_the_first_run_delays_the_session_but_loses_nothing(dist):
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=8)
    dist.start_workers(queues=("lg.tools",), pool="prefork", concurrency=2)  # prefork: the tool runs in a pool child
    (dist.ready_dir / "hold-1").touch()

    first = dist_app.SessionAgent.start_execution("first question", session_id="conv-42", actor_id="user-7")
    child = dist.wait_for_hang("gate-1")
    [(second_id, state)] = started(start_elsewhere(dist, "second question"))
    assert state == "pending"

    os.kill(child, signal.SIGKILL)  # the redelivered step finds its holder dead and takes over
    (dist.ready_dir / "hold-1").unlink()
    runs = [get_execution(run_id).wait(timeout=90) for run_id in (first.run_id, second_id)]

    assert [run.outcome for run in runs] == ["completed", "completed"], [run.error for run in runs]
    assert runs[1].response == "seen: first question | second question"
    assert_never_interleaved(dist.config.runtime().store, [run.id for run in runs])
    assert [role for role, _text in session_turns(dist)] == ["user", "assistant", "tool", "assistant"] * 2
    gates = [n for tool, n, _key in dist.calls() if tool == "gate"]
    assert gates == [1, 1, 2]  # gate 1 ran again after the kill (an idempotent tool); the second run waited
