"""The README's replay recipe, run exactly as written.

The recipe's blocks are the ones after a ``<!-- replay-recipe`` comment: a Python file (its first
line names it) and shell commands. The test writes the file into an empty directory and runs the
commands there, one bash process for all of them as a reader pastes them into a terminal, with the
installed ``lg`` first on PATH and none of the developer's ``LG_*`` settings: the embedded default
(a SQLite store in that directory, runs in the ``lg`` process, no broker, no API key). Each
command's output and exit status is then checked against what the README says it does.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.readme import CodeBlock, marked_blocks

MARKER = "replay-recipe"
BIN = Path(sys.executable).parent
_START, _EXIT = "@@@ command ", "@@@ exit "


@dataclass(frozen=True)
class Step:
    """One command of the recipe as the shell ran it."""

    command: str
    output: str  # stdout and stderr, interleaved as a terminal shows them
    status: int

    @property
    def words(self) -> list[str]:
        return shlex.split(self.command, comments=True)


@pytest.mark.slow  # about a dozen `lg` processes, a second or more each
def test_the_readme_replay_recipe_fails_a_run_then_retries_forks_and_retries_failed_runs(tmp_path: Path) -> None:
    agent_file, commands = recipe()
    name = agent_file.code.splitlines()[0].removeprefix("#").strip()
    assert re.fullmatch(r"\w+\.py", name), f"the recipe's Python block must start with '# FILE.py', got {name!r}"
    (tmp_path / name).write_text(agent_file.code)

    steps = run_in_shell(commands.code, tmp_path)
    for step in steps:
        assert "Traceback" not in step.output, f"{step.command}\n{step.output}"

    first, second = asks = lg(steps, "ask")
    assert [a.status for a in asks] == [1, 1], transcript(steps)
    failed_ids = [option(a, "--run-id") for a in asks]
    for ask, run_id in zip(asks, failed_ids, strict=True):
        assert f"failed run {run_id}: HTTPError" in ask.output, ask.output
    run_id, other_id = failed_ids

    (listed,) = lg(steps, "runs", "list", "--status", "failed")
    assert listed.status == 0, listed.output
    for failed in failed_ids:
        assert re.search(rf"^{re.escape(failed)}\s.*\bfailed\b", listed.output, re.MULTILINE), listed.output

    (shown,) = lg(steps, "runs", "show", run_id)
    assert shown.status == 0 and "HTTPError" in shown.output, shown.output
    assert re.search(r"^root/turn-0/tool/\S+\s+tool\s+succeeded", shown.output, re.MULTILINE), shown.output
    assert re.search(r"^root/turn-1/model\s+model\s+failed\s.*HTTPError", shown.output, re.MULTILINE), shown.output

    (events,) = lg(steps, "runs", "events", run_id)
    types = re.findall(r"^\d+\s+\S+\s+(\w+)", events.output, re.MULTILINE)
    assert types[-4:] == ["tool_execution_stop", "model_retry", "model_retry", "run_error"], events.output

    (retried,) = lg(steps, "runs", "retry", run_id)
    assert retried.status == 0 and f"completed run {run_id}" in retried.output, retried.output
    assert "-> order_status" not in retried.output, "a retry must not call the committed tool again"

    (forked,) = lg(steps, "runs", "fork", run_id)
    fork_id, from_step = option(forked, "--run-id"), option(forked, "--from-step")
    assert forked.status == 0, forked.output
    assert f"forked run {fork_id} from {run_id} at step {from_step}" in forked.output, forked.output
    assert "-> order_status" in forked.output, "a fork from the tool step calls the tool again"
    assert f"completed run {fork_id}" in forked.output, forked.output

    (retried_failed,) = lg(steps, "runs", "retry-failed")
    assert option(retried_failed, "--since")
    assert retried_failed.status == 0, retried_failed.output
    assert f"retried {other_id}: completed" in retried_failed.output, retried_failed.output
    assert f"retried {run_id}" not in retried_failed.output, "a run retried already has completed"

    store = ["--store", f"sqlite:///{tmp_path / 'runs.db'}"]
    records = json.loads(lg_here(tmp_path, "runs", "list", "--json", *store))
    assert {r["id"]: r["status"] for r in records} == dict.fromkeys([run_id, other_id, fork_id], "completed")
    fork_events = json.loads(lg_here(tmp_path, "runs", "events", fork_id, "--json", *store))
    (marker,) = [e for e in fork_events if e["type"] == "run_forked"]
    assert marker["data"]["parent_run_id"] == run_id and marker["data"]["from_step"] == from_step
    retry_events = json.loads(lg_here(tmp_path, "runs", "events", run_id, "--json", *store))
    assert [e["type"] for e in retry_events].count("run_retried") == 1


def test_the_recipe_shell_block_runs_each_line_as_one_command() -> None:
    """The transcript is split per line, so a command continued over lines would be cut in two."""
    _, commands = recipe()
    assert not [line for line in commands.code.splitlines() if line.rstrip().endswith("\\")]


def recipe() -> tuple[CodeBlock, CodeBlock]:
    blocks = marked_blocks(MARKER)
    assert [b.language for b in blocks] == ["python", "sh"], (
        f"README.md must mark the replay recipe's Python file and its shell commands with '<!-- {MARKER}'"
    )
    return blocks[0], blocks[1]


def run_in_shell(commands: str, cwd: Path) -> list[Step]:
    """Run every command line of ``commands`` in one bash, as written, noting each one's output and status."""
    script = ["exec 2>&1"]
    for line in commands.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        script += [f"printf '\\n%s%s\\n' {shlex.quote(_START)} {shlex.quote(line)}", line, f'echo "{_EXIT}$?"']
    env = {k: v for k, v in os.environ.items() if not k.startswith("LG_") and k != "PYTHONPATH"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stdout
    return parse_transcript(result.stdout)


def parse_transcript(text: str) -> list[Step]:
    steps = []
    for chunk in text.split(f"\n{_START}")[1:]:
        command, _, rest = chunk.partition("\n")
        output, _, status = rest.rpartition(_EXIT)
        steps.append(Step(command, output, int(status.strip())))
    return steps


def lg(steps: list[Step], *prefix: str) -> list[Step]:
    """The recipe's ``lg`` commands whose arguments start with ``prefix``."""
    found = [s for s in steps if s.words[:1] == ["lg"] and s.words[1 : 1 + len(prefix)] == list(prefix)]
    assert found, f"the recipe has no `lg {' '.join(prefix)}` command:\n{transcript(steps)}"
    return found


def option(step: Step, name: str) -> str:
    words = step.words
    assert name in words, f"`{step.command}` has no {name}"
    return words[words.index(name) + 1]


def lg_here(cwd: Path, *arguments: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LG_")}
    result = subprocess.run([str(BIN / "lg"), *arguments], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def transcript(steps: list[Step]) -> str:
    return "\n".join(f"$ {s.command}\n{s.output}[exit {s.status}]" for s in steps)
