"""A user's mistake in a setting is one line on stderr and a nonzero exit, never a traceback.

Each case runs the real ``lg`` console script in a child process, in a
directory of its own (so its ``lg.yaml`` is the one read), with the agents of
``cli_app`` importable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
LG = str(Path(sys.executable).with_name("lg"))


def lg(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LG_")}
    base["PYTHONPATH"] = os.pathsep.join((str(cwd), str(HERE)))
    return subprocess.run([LG, *args], cwd=cwd, env={**base, **env}, capture_output=True, text=True, timeout=120)


def one_error_line(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The single ``error:`` line of a failed command, checked for ``fragments``."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("depth", [150, 1_000, 100_000])
def test_a_deeply_nested_lg_yaml_is_one_line_naming_the_file(tmp_path: Path, depth: int) -> None:
    (tmp_path / "lg.yaml").write_text("providers:\n  gateway: " + "[" * depth + "]" * depth + "\n")

    result = lg("ask", "cli_app:EchoAgent", "hi", cwd=tmp_path)

    line = one_error_line(result, "nests too deeply", "at most 100 levels")
    assert str(tmp_path / "lg.yaml") in line


def test_a_deeply_nested_json_variable_is_one_line_naming_it(tmp_path: Path) -> None:
    deep = '{"gateway": ' + "[" * 5_000 + "]" * 5_000 + "}"

    result = lg("ask", "cli_app:EchoAgent", "hi", cwd=tmp_path, LG_PROVIDERS=deep)

    one_error_line(result, "$LG_PROVIDERS", "nests too deeply", "at most 100 levels")


@pytest.mark.parametrize("command", [("runs", "list"), ("ask", "cli_app:EchoAgent", "hi")])
def test_a_store_path_longer_than_the_file_system_allows_is_one_line(tmp_path: Path, command: tuple[str, ...]) -> None:
    store = f"sqlite:///{tmp_path / ('r' * 300)}.db"

    result = lg(*command, cwd=tmp_path, LG_RUN_STORE=store)

    assert result.returncode == 2
    line = one_error_line(result, "$LG_RUN_STORE", "File name too long", "choose a shorter path")
    assert len(line) < 400  # the path is cut in the middle, not printed whole


SHAPES = """
def no_arguments():
    return "alice"


def two_arguments(invocation, tenant):
    return "alice"


async def asynchronous(invocation):
    return "alice"


def by_invocation(invocation):
    return "alice"
"""


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("no_arguments", "takes ()"),
        ("two_arguments", "takes (invocation, tenant)"),
        ("asynchronous", "is async"),
    ],
)
def test_a_session_actor_of_the_wrong_shape_is_one_line(tmp_path: Path, name: str, fragment: str) -> None:
    (tmp_path / "actors.py").write_text(SHAPES)
    (tmp_path / "lg.yaml").write_text(f"session_actor: actors:{name}\n")

    result = lg("ask", "cli_app:EchoAgent", "hi", "--store", f"sqlite:///{tmp_path / 'runs.db'}", cwd=tmp_path)

    assert result.returncode == 2
    one_error_line(result, "session_actor", f"'actors:{name}'", fragment, "session_actor(invocation)")


def test_a_session_actor_taking_the_invocation_runs(tmp_path: Path) -> None:
    (tmp_path / "actors.py").write_text(SHAPES)
    (tmp_path / "lg.yaml").write_text("session_actor: actors:by_invocation\n")

    result = lg("ask", "cli_app:EchoAgent", "hi", "--store", f"sqlite:///{tmp_path / 'runs.db'}", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello from the echo agent.\n"
