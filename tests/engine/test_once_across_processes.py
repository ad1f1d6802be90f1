"""``Run.once`` serializes callers in different processes, as the spec's "concurrent callers are serialized".

A run's parallel tool calls run on different workers; each process here plays
one, calling ``run.once("charge-card", ...)`` on the same stored run (a SQLite
file shared by the processes). The block writes to a journal file, so what ran
where is a fact read afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lg_core import Agent, Configuration, with_configuration
from lg_core.providers import scripted

scripted.register("once-across", [{"text": "ok"}])


class OnceAgent(Agent):
    model = "scripted:once-across"


CALLER = r"""
import os, sys, time
from pathlib import Path
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

config = Configuration(run_store=store)
with with_configuration(config):
    run = config.runtime().get_run(run_id)
    note("calls")
    try:
        note(f"got {run.once('charge-card', block)!r}")
    except RuntimeError as exc:
        note(f"raised {exc}")
config.close()
"""


@pytest.fixture
def stored_run(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    config = Configuration(run_store=url)
    with with_configuration(config):
        run = OnceAgent.build_run("Charge the card")
        config.runtime().begin(run, distributed=True)  # stored and running; its steps are not executed here
    config.close()
    return url, run.id


class Callers:
    def __init__(self, tmp_path: Path, url: str, run_id: str) -> None:
        self.journal, self.gate = tmp_path / "journal.log", tmp_path / "gate"
        self.url, self.run_id = url, run_id
        self.journal.touch()

    def start(self, name: str, mode: str) -> subprocess.Popen:
        args = [sys.executable, "-c", CALLER, self.url, self.run_id, name, str(self.journal), str(self.gate), mode]
        return subprocess.Popen(args, env={**os.environ, "PYTHONPATH": os.getcwd()})

    def lines(self) -> list[str]:
        return self.journal.read_text().splitlines()

    def wait_for(self, line: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while line not in self.lines():
            assert time.monotonic() < deadline, (line, self.lines())
            time.sleep(0.02)


@pytest.fixture
def callers(tmp_path, stored_run):
    return Callers(tmp_path, *stored_run)


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
