"""``lg demo`` as a user runs it: a real process, which itself starts and SIGKILLs a child."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

LG = Path(sys.executable).with_name("lg")


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LG_RUN_STORE", "LG_IMPORTS", "COLUMNS")}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, **kwargs)


def test_lg_demo_streams_crashes_resumes_and_proves_no_committed_call_ran_twice(
    tmp_path: Path,
) -> None:
    result = run([sys.executable, "-m", "lg_core.cli", "demo"], cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "Traceback" not in out + result.stderr

    # 1. streaming: the tool call, then the streamed answer
    assert '-> help_center_lookup(topic="refunds")' in out
    assert "You can get a full refund within 30 days of delivery." in out
    # 2. the child dies of SIGKILL in its third lookup, after printing the first two
    assert "child exited with code -9 (killed by SIGKILL)" in out
    assert '  | -> help_center_lookup(topic="repairs")' in out
    # 3. the store keeps the run running, with the committed steps and one open tool step
    assert "stored status after the crash: running" in out
    assert "(that process is gone)" in out
    assert "5 steps committed (tool calls: refunds, warranty); open: repairs" in out
    # 4. resumed here and completed
    assert "open steps: root/turn-2/tool/call_2_0" in out
    assert "Your blender is past the 30-day refund window" in out
    assert "stored status after the resume: completed" in out
    # 5. the proof
    assert "PASS committed tool calls ran exactly once: refunds, warranty" in out
    assert "PASS only the call interrupted by the kill ran again: repairs" in out
    assert "FAIL" not in out
    assert "demo succeeded" in out
    journal = [line.split()[1] for line in out.splitlines() if re.match(r"^\d+\s+(refunds|warranty|repairs)\s", line)]
    assert journal == ["refunds", "warranty", "repairs", "repairs"]


def test_lg_console_script_keeps_the_demo_store_for_lg_runs(tmp_path: Path) -> None:
    assert LG.exists(), f"the lg console script is not installed next to {sys.executable}"
    demo_dir = tmp_path / "demo dir"  # a space: the commands the demo prints must quote the path
    result = run([str(LG), "demo", "--dir", str(demo_dir)])
    assert result.returncode == 0, result.stdout + result.stderr
    store = f"sqlite:///{demo_dir / 'runs.db'}"
    printed = [  # "  lg runs show ...", "Ask the agent yourself: lg ask ..."
        re.sub(r"^.*?: (?=lg )", "", line.strip())
        for line in result.stdout.splitlines()
        if re.match(r"^(.*?: )?lg ", line.strip())
    ]
    assert len(printed) == 3, printed  # lg runs show, lg runs events, lg ask
    for line in printed:  # each pastes into a shell as one command
        words = shlex.split(line)
        assert words[0] == "lg" and ("--store" not in words or words[words.index("--store") + 1] == store)
        if words[1] == "runs":
            assert run([str(LG), *words[1:]]).returncode == 0, line
    assert shlex.split(printed[2])[1:] == [
        "ask",
        "lg_core.demo.support:SupportAgent",
        "Can I get a refund for my order?",
    ]

    listed = run([str(LG), "runs", "list", "--store", store, "--json"])
    assert listed.returncode == 0, listed.stderr
    (record,) = json.loads(listed.stdout)
    assert (record["entrypoint"], record["status"]) == (
        "lg_core.demo.support:DurableSupportAgent",
        "completed",
    )

    shown = run([str(LG), "runs", "show", record["id"], "--store", store])
    assert shown.returncode == 0, shown.stderr
    assert "root/turn-3/model" in shown.stdout
    events = run([str(LG), "runs", "events", record["id"], "--store", store, "--json"])
    assert "run_resumed" in [e["type"] for e in json.loads(events.stdout)]


def test_a_demo_dir_that_cannot_be_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("not a directory")
    result = run([str(LG), "demo", "--dir", str(taken)])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"cannot use --dir {taken}" in result.stderr
