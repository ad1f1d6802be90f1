"""Chaos: the run store's PostgreSQL crashes (every server process SIGKILLed) with runs in flight.

Each test gets a PostgreSQL server of its own (the session's server is shared
by every other test), kills the postmaster and all its backends at once,
leaves it down for a moment, and starts it again on the same data directory:
the server replays its WAL, as after a host crash. Workers, the scheduler and
the client lose their connections meanwhile and must carry on. The invariants
are those of every chaos test (chaos_checks): every run completes, no
committed step runs again (each execution of a step has its own claim), an
at_most_once tool never runs twice, and the event log has no gaps or
duplicates.
"""

from __future__ import annotations

import contextvars
import json
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import chaos_checks as chaos
import dist_app
import pytest

from lg_scheduler.stack.servers import PostgresServer

pytestmark = pytest.mark.chaos

DOWN_SECONDS = 1.5  # shorter than the lease (3 s here): a holder keeps its step
# Longer than a store transaction's retries (lg_core.store.transient_errors.retry_transient, about 4-9 s):
# a worker's commit waits the rest out (store_outage_patience), and a claim sends its task again.
LONG_DOWN_SECONDS = 12.0


class CrashablePostgres(PostgresServer):
    """The test suite's server, but its WAL writer sleeps 10 s (PostgreSQL's longest) instead of 0.2 s.

    A transaction that commits without waiting for its WAL flush then stays in
    the server's memory until another commit flushes it, so a crash right after
    one loses it every time instead of only when the crash beats the WAL
    writer, and the claim test below fails every time against claims committed
    that way.
    """

    def command(self, *, durable: bool | None = None) -> list[str]:
        return [*super().command(durable=durable), "-c", "wal_writer_delay=10s"]


@pytest.fixture
def own_postgres():
    server = CrashablePostgres().start()  # in a directory of its own: the postgres user cannot enter tmp_path
    yield server
    server.stop()


@pytest.fixture
def pg_url(own_postgres) -> str:
    """Overrides the session server's database: these tests crash their server."""
    return own_postgres.create_database(f"lg_{uuid.uuid4().hex[:12]}")


def _cluster_pids(server: PostgresServer) -> list[int]:
    """The postmaster (first line of postmaster.pid) and every process it started."""
    postmaster = int((server.data / "postmaster.pid").read_text().splitlines()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == postmaster:
                children.append(int(entry.name))
    return [postmaster, *children]


def _crash(server: PostgresServer) -> None:
    """SIGKILL the whole cluster at once: no shutdown checkpoint, no goodbye to any client."""
    for pid in _cluster_pids(server):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert server.process is not None
    server.process.wait(timeout=10)


def _crash_and_restart(server: PostgresServer, down_seconds: float = DOWN_SECONDS) -> float:
    """:func:`_crash`, wait ``down_seconds``, start the server again; returns when it was restarted."""
    _crash(server)
    time.sleep(down_seconds)
    server.start()
    assert "database system was interrupted" in server.log_path.read_text(), "PostgreSQL did not recover from a crash"
    return time.time()


def _assert_sound(verdict) -> None:
    assert verdict.unfinished == [] and verdict.problems == [], "\n".join(verdict.unfinished + verdict.problems)


def test_a_tool_call_running_across_a_postgres_crash_commits_once(dist, scheduler, own_postgres):
    """The crash comes right after a tool step's claim, which must have been flushed: the call
    outlives the outage and its holder commits its result. Had the crash lost the claim, the
    step would look scheduled again, the relay would send it to the other tools worker (this
    one's only thread is busy with it), and the call would run twice on one recorded claim."""
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=4)
    hang = {"DIST_APP_HANG": "step:2", "DIST_APP_HANG_ONCE": "1", "DIST_APP_HANG_SECONDS": str(DOWN_SECONDS + 4)}
    for _ in range(2):
        dist.start_workers(queues=("lg.tools",), pool="threads", concurrency=1, **hang)
    execution = dist_app.StepAgent.start_execution("Run StepAgent to the end.")
    chaos.wait_ready(dist, "step-2", 1)

    _crash_and_restart(own_postgres)
    chaos.wait_all([execution], timeout=90)

    verdict = chaos.check_runs(dist, {execution.run_id: dist_app.TURNS})
    _assert_sound(verdict)
    assert verdict.repeated_calls == []
    step = chaos.store_of(dist).load_step(execution.run_id, "root/turn-2/tool/call_2_0")
    assert step is not None and step.attempts == 1, step


@pytest.mark.parametrize(
    "agent_name, tool, lease_seconds",
    [("StepAgent", "step", 30.0), ("StepAgent", "step", 9.0), ("ChargeAgent", "charge", 9.0)],
)
def test_a_tool_call_that_finishes_during_a_long_outage_commits_when_postgres_is_back(
    dist, scheduler, own_postgres, agent_name, tool, lease_seconds
):
    """The call finishes while the server is down for longer than a store call's retries; its
    commit waits (store_outage_patience) and lands once the server is back: one attempt, one call,
    and an at_most_once call keeps its result instead of ending "outcome unknown".

    A 30 s lease outlasts the 12 s outage. A 9 s lease runs out during it, so the holder's commit
    races the scheduler's first pass after it; the scheduler, which saw the outage, gives the
    holder a lease period to renew or commit before it takes the step over
    (lg_scheduler.recovery.OutageGrace). Here the commit usually wins that race even without the
    grace (tests/store/test_store_unavailable.py shows the grace itself)."""
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=4)
    hang = {"DIST_APP_HANG": f"{tool}:2", "DIST_APP_HANG_ONCE": "1", "DIST_APP_HANG_SECONDS": "3"}
    [tools] = dist.start_workers(queues=("lg.tools",), pool="threads", concurrency=1, **hang)
    execution = getattr(dist_app, agent_name).start_execution("Run to the end.")
    chaos.wait_ready(dist, f"{tool}-2", 1)

    _crash_and_restart(own_postgres, LONG_DOWN_SECONDS)
    chaos.wait_all([execution], timeout=90)

    verdict = chaos.check_runs(dist, {execution.run_id: dist_app.TURNS})
    _assert_sound(verdict)
    assert verdict.repeated_calls == [] and verdict.unknown_outcomes == []
    step = chaos.store_of(dist).load_step(execution.run_id, "root/turn-2/tool/call_2_0")
    assert step is not None and step.attempts == 1 and step.status == "succeeded", step
    log = tools.log.read_text()
    assert "the commit of step root/turn-2/tool/call_2_0" in log and "the run store answers again after" in log, log[
        -3000:
    ]
    from test_soak import _wait_for

    granted = "the run store answers again: leases that expired"  # the scheduler's pass after the outage may come later
    _wait_for(lambda: granted in scheduler.text(), timeout=20)
    assert granted in scheduler.text(), scheduler.text()[-3000:]


def test_a_model_turn_streaming_through_a_long_outage_waits_and_commits_once(dist, scheduler, own_postgres):
    """An answer streamed for about 15 s (1,500 words) while the server is down for 12 s: the
    turn's lease (3 s) runs out and it cannot be confirmed, so the turn pauses until the server is
    back, confirms it still holds its step, streams the rest and commits it: one attempt, the
    whole answer once, never stopping at the unconfirmed lease to run the whole turn again."""
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=4)
    message = " ".join(f"w{n}" for n in range(1500))
    execution = dist_app.EchoAgent.start_execution(message)
    time.sleep(2.0)  # streaming (0.01 s a word)

    _crash_and_restart(own_postgres, LONG_DOWN_SECONDS)
    run = execution.wait(timeout=90)

    assert (run.outcome, run.response) == ("completed", "You said: " + message)
    step = chaos.store_of(dist).load_step(execution.run_id, "root/turn-0/model")
    assert step is not None and (step.status, step.attempts) == ("succeeded", 1), step
    worker_log = "".join(log.read_text() for log in dist.tmp_path.glob("w*.log"))
    assert "the step waits until the store confirms it still holds it" in worker_log, worker_log[-3000:]


@pytest.mark.parametrize("down_seconds", [DOWN_SECONDS, LONG_DOWN_SECONDS])
def test_runs_in_flight_complete_across_a_postgres_crash(dist, scheduler, own_postgres, down_seconds):
    """Six runs (three with an at_most_once tool) mid tool calls; the server is down briefly, or
    longer than a store call's retries, so the workers' commits and claims wait it out.
    Readers that follow or wait for runs in this process meanwhile wait the outage out."""
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=8)
    dist.start_workers(queues=("lg.tools",), pool="threads", concurrency=4, DIST_APP_TOOL_DELAY="0.3")
    agents = [dist_app.StepAgent, dist_app.ChargeAgent] * 3
    executions = [agent.start_execution(f"Run {agent.__name__} to the end.") for agent in agents]
    turns = {e.run_id: dist_app.TURNS for e in executions}
    chaos.wait_for_calls(dist, 6)

    watchers = chaos.Watchers(executions[:3])  # readers in this process, following through the outage
    restarted_at = _crash_and_restart(own_postgres, down_seconds)
    chaos.wait_all(executions, timeout=120)

    _assert_sound(chaos.check_runs(dist, turns))
    assert watchers.results(timeout=60) == {"events": "run_stop", "async events": "run_stop", "wait": "completed"}
    if down_seconds == LONG_DOWN_SECONDS:
        # Some step's store call spent its retries during the outage: a commit then waited for the
        # server (lg_core.store.outage_waits), a claim's task sent itself again (lg_workers.tasks).
        worker_logs = "".join(log.read_text() for log in dist.tmp_path.glob("w*.log"))
        assert "trying again until it answers" in worker_logs or "sent again in 1 s" in worker_logs
    print(
        f"\n[chaos] PostgreSQL crashed, down {down_seconds} s: restart -> next committed step: "
        f"{chaos.describe(chaos.recovery_times(chaos.store_of(dist), list(turns), restarted_at))}"
    )


def test_runs_queued_on_one_session_go_on_in_turn_after_a_postgres_crash(dist, scheduler, own_postgres):
    """Three runs on one session; the server crashes while the first is in the middle of its turn
    (a tool call held open, checking its context): the runs still go one after another, each seeing
    every earlier run's turn, and the session holds each turn once."""
    from test_sessions_distributed import assert_never_interleaved, session_turns

    dist.start_workers(pool="threads", concurrency=8)
    (dist.ready_dir / "hold-1").touch()
    texts = ["first question", "second question", "third question"]
    executions = [
        dist_app.SessionAgent.start_execution(text, session_id="conv-42", actor_id="user-7") for text in texts
    ]
    dist.wait_for_hang("gate-1")
    assert [e.state for e in executions] == ["running", "pending", "pending"]

    _crash_and_restart(own_postgres)
    (dist.ready_dir / "hold-1").unlink()
    runs = [e.wait(timeout=90) for e in executions]

    assert [run.outcome for run in runs] == ["completed"] * 3, [run.error for run in runs]
    assert_never_interleaved(chaos.store_of(dist), [run.id for run in runs])
    assert [run.response for run in runs] == [
        "seen: first question",
        "seen: first question | second question",
        "seen: first question | second question | third question",
    ]
    assert [role for role, _text in session_turns(dist)] == ["user", "assistant", "tool", "assistant"] * 3


def test_a_web_app_answers_503_while_postgres_is_down_and_its_event_streams_go_on(dist, scheduler, own_postgres):
    """examples/web_app.py during an outage: a new run is refused with 503 and Retry-After (and
    no server address in the body), while an SSE stream opened before the crash follows its run
    through the outage to its terminal event."""
    from test_web_app import WebApp

    dist.start_workers(pool="threads", concurrency=8)
    web = WebApp(dist)
    try:
        (dist.ready_dir / "hold-1").touch()
        run_id = web.start("gates")
        streamed: list = []
        reader = threading.Thread(target=lambda: streamed.extend(web.events(run_id)), daemon=True)
        reader.start()
        dist.wait_for_hang("gate-1")

        _crash(own_postgres)
        refused = web.client.post("/runs", json={"agent": "gates", "message": "Go."})
        own_postgres.start()
        (dist.ready_dir / "hold-1").unlink()
        reader.join(90)

        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "2" and "127.0.0.1" not in refused.text
        assert streamed and streamed[-1].event == "run_stop", [sse.event for sse in streamed]
        assert web.client.get(f"/runs/{run_id}").json()["outcome"] == "completed"
    finally:
        web.stop()


def test_a_batch_submit_rides_out_a_postgres_crash(dist, scheduler, own_postgres, tmp_path, caplog):
    """``lg batch submit`` on workers, with the server down longer than a store call retries: the
    submitter's polls and starts give up (StoreUnavailableError), it pauses and goes on, and every
    item ends with one result line, its run completed and the batch row finished."""
    from test_batch_distributed import app_env, write_inputs

    from lg_scheduler.batch import run_id_for, submit_batch
    from tests.batch.batch_app import ItemAgent, logged_items

    items = 24
    dist.start_workers(**app_env(dist, BATCH_APP_DELAY="0.2"))
    path = write_inputs(tmp_path / "inputs.jsonl", items)
    out = tmp_path / "results.jsonl"
    submitted: dict = {}

    def submit() -> None:
        try:
            submitted["report"] = submit_batch(ItemAgent, path, concurrency=6, out=out, progress=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            submitted["error"] = exc

    # In this test's configuration: a plain thread would build the process default from LG_RUN_STORE.
    submitter = threading.Thread(target=contextvars.copy_context().run, args=(submit,), daemon=True)
    submitter.start()
    calls = dist.tmp_path / "batch-calls.log"
    deadline = time.monotonic() + 60
    while len(logged_items(calls) if calls.exists() else []) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)

    with caplog.at_level("INFO", logger="lg_core.store.outage_waits"):
        _crash_and_restart(own_postgres, LONG_DOWN_SECONDS)
        submitter.join(180)

    assert "error" not in submitted, repr(submitted.get("error"))
    report = submitted["report"]
    assert report.ok and report.outcomes == {"completed": items}, report.outcomes
    lines = [json.loads(line)["line"] for line in out.read_text().splitlines()]
    assert sorted(lines) == list(range(1, items + 1))  # one result each
    store = chaos.store_of(dist)
    assert store.load_batch(report.batch_id).status == "finished"
    assert all(store.load_run(run_id_for(report.batch_id, str(n))).status == "completed" for n in range(1, items + 1))
    assert set(logged_items(calls)) == {f"item {n}" for n in range(1, items + 1)}
    outage = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"batch {report.batch_id}:")]
    assert any("cannot be reached" in m for m in outage) and any("answers again" in m for m in outage), outage


# Long enough that a task taken from the queue during the outage cannot claim its step in a store
# call's 4-9 s of retries: that call starts only after the tools worker's one thread gave up on the
# commit of the call it ran when the server crashed (another 4-9 s; the worker has no
# store_outage_patience, or its thread would wait in that commit until the server is back).
CLAIM_OUTAGE_SECONDS = 25.0


@pytest.mark.parametrize("relay_grace", [90.0])
def test_a_step_whose_claim_gave_up_is_sent_again_by_its_task_not_left_to_the_relay(
    dist, scheduler, own_postgres, relay_grace
):
    """Two runs share one single-thread tools worker; one's tool call is running when the server
    crashes, the other's waits in the queue. That one is taken while the server is still down and
    cannot be claimed: its task sends itself again (lg_workers.tasks.run_step), so it runs as
    soon as the server is back, without waiting for the outbox relay (``relay_grace``)."""
    dist.start_workers(queues=("lg.orchestrate", "lg.model"), pool="threads", concurrency=4)
    hang = {"DIST_APP_HANG": "step:2", "DIST_APP_HANG_ONCE": "1", "DIST_APP_HANG_SECONDS": "3"}
    [tools] = dist.start_workers(
        queues=("lg.tools",), pool="threads", concurrency=1, LG_STORE_OUTAGE_PATIENCE="0", **hang
    )
    executions = [dist_app.StepAgent.start_execution(f"Run {n} to the end.") for n in (1, 2)]
    chaos.wait_ready(dist, "step-2", 1)
    time.sleep(1.0)  # the other run's second tool call reaches the queue behind the hanging one

    restarted_at = _crash_and_restart(own_postgres, CLAIM_OUTAGE_SECONDS)
    chaos.wait_all(executions, timeout=40)  # well before relay_grace after the restart

    _assert_sound(chaos.check_runs(dist, {e.run_id: dist_app.TURNS for e in executions}))
    log = tools.log.read_text()
    assert "could not be reached" in log and "sent again in 1 s" in log, log[-3000:]
    assert time.time() - restarted_at < relay_grace


SOAK_RUNS = 60


@pytest.mark.timeout(420)
@pytest.mark.parametrize("relay_grace", [5.0])  # as the soak: a backlog is not re-sent every 2 s
def test_every_run_completes_through_random_worker_kills_and_postgres_crashes(
    dist, scheduler, own_postgres, relay_grace
):
    """tests/chaos/test_soak.py's killer (pool children and whole workers SIGKILLed at random),
    and meanwhile the run store's PostgreSQL crashed every few seconds and down for 0.5-5 s:
    no run lost, stuck or duplicated."""
    import random

    from test_soak import SEED, Killer

    rng = random.Random(SEED)
    model = {
        "queues": ("lg.orchestrate", "lg.model"),
        "pool": "threads",
        "concurrency": 16,
        "DIST_APP_MODEL_DELAY": "0.1",
    }
    tools = {"queues": ("lg.tools",), "pool": "prefork", "concurrency": 2, "DIST_APP_TOOL_DELAY": "0.2"}
    both = {
        "queues": ("lg.model", "lg.tools"),
        "pool": "prefork",
        "concurrency": 2,
        "DIST_APP_MODEL_DELAY": "0.1",
        "DIST_APP_TOOL_DELAY": "0.2",
    }
    killer = Killer(dist, [model, tools, both], rng)
    store = chaos.store_of(dist)
    agents = [dist_app.ShortStepAgent, dist_app.ShortChargeAgent]
    run_ids = [agents[i % 2].start_execution(f"soak {i}").run_id for i in range(SOAK_RUNS)]

    crashes: list[float] = []
    stop = threading.Event()

    def crash_now_and_then() -> None:
        while not stop.wait(rng.uniform(3.0, 6.0)):
            down = rng.uniform(0.5, 5.0)
            _crash_and_restart(own_postgres, down)
            crashes.append(down)

    crasher = threading.Thread(target=crash_now_and_then, name="pg-crasher", daemon=True)
    killer.start()
    crasher.start()
    _wait_until_finished(store, run_ids, timeout=120)
    stop.set()
    killer.stop.set()
    crasher.join(30)
    killer.join(60)
    _wait_until_finished(store, run_ids, timeout=120)

    verdict = chaos.check_runs(dist, {run_id: dist_app.SHORT_TURNS for run_id in run_ids})
    records = [store.load_run(run_id) for run_id in run_ids]
    print(
        f"\n[soak+pg] seed {SEED}: {len(crashes)} PostgreSQL crashes (down {[round(d, 1) for d in crashes]} s), "
        f"kills {killer.kills}, at_most_once outcomes unknown {len(verdict.unknown_outcomes)}, "
        f"idempotent calls re-run {len(verdict.repeated_calls)}, model turns re-run {verdict.model_retries}"
    )
    assert killer.error is None, killer.error
    assert crashes, "every run finished before the first crash; the soak proved nothing about PostgreSQL"
    assert [r.id for r in records if r.finished and r.status != "completed"] == []  # lost
    _assert_sound(verdict)  # stuck runs, duplicated work, event-log gaps


def _wait_until_finished(store, run_ids: list[str], timeout: float) -> None:
    """test_soak's wait, with a store that may be down meanwhile (it answers later)."""
    from test_soak import _open, _wait_for

    from lg_core.errors import StoreUnavailableError

    def finished() -> bool:
        try:
            return _open(store, run_ids) == 0
        except StoreUnavailableError:
            return False

    _wait_for(finished, timeout=timeout)
