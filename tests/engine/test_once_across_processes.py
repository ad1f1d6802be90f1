"""``Run.once`` serializes callers in different processes, as the spec's "concurrent callers are serialized".

A run's parallel tool calls run on different workers; each process here plays
one, calling ``run.once("charge-card", ...)`` on the same stored run (a SQLite
file shared by the processes, or PostgreSQL). The block writes to a journal
file, so what ran where is a fact read afterwards.

A caller may play a process on another host ($CALLER_HOST: its holder is not
checked by pid here, only by its lease) whose clock is off ($CALLER_SKEW
seconds added to time.time): on PostgreSQL the claim's lease is the server's
call, whatever either host's clock says.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lg_core import Agent, Configuration, with_configuration
from lg_core.providers import scripted

scripted.register("once-across", [{"text": "ok"}])


class OnceAgent(Agent):
    model = "scripted:once-across"


CALLER = r"""
import os, sys, time
from pathlib import Path

skew = float(os.environ.get("CALLER_SKEW", "0"))
if skew:
    real_time = time.time
    time.time = lambda: real_time() + skew
if os.environ.get("CALLER_HOST"):
    import lg_core.lease_holders
    lg_core.lease_holders.hostname = lambda: os.environ["CALLER_HOST"]

from lg_core import Configuration, with_configuration

store, run_id, name, journal, gate, mode = sys.argv[1:7]
journal, gate = Path(journal), Path(gate)

def note(text):
    with journal.open("a") as f:
        f.write(f"{name} {text}\n")

def block():
    note("performs")
    while mode in ("hold", "hold-then-raise") and not gate.exists():
        time.sleep(0.01)
    if mode == "hold-then-raise":
        raise RuntimeError("card declined")
    return f"charged by {name}"

config = Configuration(run_store=store, lease_seconds=float(os.environ.get("CALLER_LEASE", "15")))
with with_configuration(config):
    run = config.runtime().get_run(run_id)
    note("calls")
    try:
        note(f"got {run.once('charge-card', block)!r}")
    except RuntimeError as exc:
        note(f"raised {exc}")
config.close()
"""


def _store_run(url: str) -> tuple[str, str]:
    config = Configuration(run_store=url)
    with with_configuration(config):
        run = OnceAgent.build_run("Charge the card")
        config.runtime().begin(run, distributed=True)  # stored and running; its steps are not executed here
    config.close()
    return url, run.id


@pytest.fixture
def stored_run(tmp_path):
    return _store_run(f"sqlite:///{tmp_path / 'runs.db'}")


class Callers:
    def __init__(self, tmp_path: Path, url: str, run_id: str) -> None:
        self.journal, self.gate = tmp_path / "journal.log", tmp_path / "gate"
        self.url, self.run_id = url, run_id
        self.journal.touch()
        self.processes: list[subprocess.Popen] = []

    def start(self, name: str, mode: str, **env: str) -> subprocess.Popen:
        """Caller ``name`` in a process of its own; ``env``: CALLER_SKEW, CALLER_HOST, CALLER_LEASE."""
        args = [sys.executable, "-c", CALLER, self.url, self.run_id, name, str(self.journal), str(self.gate), mode]
        process = subprocess.Popen(args, env={**os.environ, "PYTHONPATH": os.getcwd(), **env})
        self.processes.append(process)
        return process

    def kill_left(self) -> None:
        """Kill the callers a failed test left waiting."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(30)

    def lines(self) -> list[str]:
        return self.journal.read_text().splitlines()

    def wait_for_renewal(self, lease: float, timeout: float = 60) -> None:
        """Wait until the claim on "charge-card" is renewed past the lease it has now: by then
        an unrenewed claim would have expired, and a waiting caller would have taken it over."""
        from lg_core.store import RunStore

        store = RunStore(self.url)
        try:
            seen = self._lease_until(store)
            deadline = time.monotonic() + timeout
            while self._lease_until(store) <= seen + lease:
                assert time.monotonic() < deadline, "the holder's heartbeat never renewed its claim"
                time.sleep(0.05)
        finally:
            store.close()

    def _lease_until(self, store: Any) -> float:
        """The lease of the claim on "charge-card" (the test waits while one is held)."""
        step = store.load_step(self.run_id, "once/charge-card")
        assert step is not None and step.lease_until is not None, f"charge-card is not claimed: {step}"
        return float(step.lease_until)

    def wait_for(self, line: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while line not in self.lines():
            assert time.monotonic() < deadline, (line, self.lines())
            time.sleep(0.02)


@pytest.fixture
def callers(tmp_path, stored_run):
    started = Callers(tmp_path, *stored_run)
    yield started
    started.kill_left()


@pytest.fixture
def pg_callers(tmp_path, pg_url):
    started = Callers(tmp_path, *_store_run(pg_url))
    yield started
    started.kill_left()


def test_a_second_process_waits_for_the_first_and_gets_none(callers):
    first = callers.start("A", "hold")
    callers.wait_for("A performs")
    second = callers.start("B", "quick")
    callers.wait_for("B calls")
    time.sleep(0.3)  # let B reach the claim while A holds it (B passes either way if it is slower)
    callers.gate.touch()
    assert first.wait(30) == 0 and second.wait(30) == 0

    lines = callers.lines()
    assert lines.count("A performs") == 1 and "B performs" not in lines
    assert "A got 'charged by A'" in lines and "B got None" in lines


def test_when_the_block_raises_the_waiting_process_performs_it(callers):
    first = callers.start("A", "hold-then-raise")
    callers.wait_for("A performs")
    second = callers.start("B", "quick")
    callers.wait_for("B calls")
    time.sleep(0.3)
    callers.gate.touch()
    assert first.wait(30) == 0 and second.wait(30) == 0

    lines = callers.lines()
    assert "A raised card declined" in lines
    assert "B performs" in lines and "B got 'charged by B'" in lines


def test_a_holder_killed_mid_block_is_taken_over_by_the_next_caller(callers):
    first = callers.start("A", "hold")
    callers.wait_for("A performs")
    first.send_signal(signal.SIGKILL)
    first.wait(30)

    second = callers.start("B", "quick")
    assert second.wait(30) == 0
    assert "B got 'charged by B'" in callers.lines()  # A's claim died with it: nothing was recorded
    third = callers.start("C", "quick")
    assert third.wait(30) == 0
    assert "C got None" in callers.lines() and "C performs" not in callers.lines()


# A claim survives a holder's heartbeat stalling for two thirds of its lease: 2 s of
# these 3 (one second's 0.67 s was little to ask of a loaded machine).
LEASE = 3
BEHIND = {"CALLER_SKEW": "-300", "CALLER_LEASE": str(LEASE)}
AHEAD = {"CALLER_SKEW": "300", "CALLER_LEASE": str(LEASE)}


def test_a_caller_whose_clock_runs_ahead_waits_for_a_live_holder_whose_clock_runs_behind(pg_callers):
    """Ten minutes apart, a three-second lease: by either host's clock the other's claim is
    expired or far from it, but only PostgreSQL's clock decides, and the holder renews it."""
    first = pg_callers.start("A", "hold", CALLER_HOST="host-behind", **BEHIND)
    pg_callers.wait_for("A performs")
    second = pg_callers.start("B", "quick", CALLER_HOST="host-ahead", **AHEAD)
    pg_callers.wait_for("B calls")
    pg_callers.wait_for_renewal(LEASE)  # more than a lease: B looks at the claim meanwhile, A's heartbeat renews it
    pg_callers.gate.touch()
    assert first.wait(30) == 0 and second.wait(30) == 0

    lines = pg_callers.lines()
    assert lines.count("A performs") == 1 and "B performs" not in lines
    assert "A got 'charged by A'" in lines and "B got None" in lines


def test_a_dead_holder_whose_clock_ran_ahead_is_taken_over_when_its_lease_ends(pg_callers):
    """Its host's clock five minutes ahead, a killed holder's lease still ends a lease
    after its last renewal, not five minutes later."""
    first = pg_callers.start("A", "hold", CALLER_HOST="host-ahead", **AHEAD)
    pg_callers.wait_for("A performs")
    first.send_signal(signal.SIGKILL)  # on "another host": nobody can see it died, its lease must end
    first.wait(30)

    second = pg_callers.start("B", "quick", CALLER_HOST="host-behind", **BEHIND)
    assert second.wait(60) == 0
    assert "B got 'charged by B'" in pg_callers.lines()
