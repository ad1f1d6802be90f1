"""What the README tells a new user to install before ``lg stack up``, checked against what the stack and
the web example need: the servers (or the script that installs them) and one set of extras for both."""

from __future__ import annotations

import re
import shlex
import tomllib

from tests.docs.readme import ROOT, section

EXAMPLES_README = ROOT / "examples" / "README.md"


def test_the_stack_section_installs_the_servers_and_the_extras_before_lg_stack_up() -> None:
    text = section("Distributed")
    for server in ("redis-server", "postgresql", "initdb", "ops/system-deps.sh"):
        assert server in text, f"the README's stack section does not mention {server}"
    commands = shell_commands(text)
    up = first_index(commands, ["lg", "stack", "up"])
    assert first_index(commands, ["ops/system-deps.sh"]) < up
    assert first_index(commands, ["pip", "install"]) < up


def test_the_stack_and_the_web_example_install_the_same_extras() -> None:
    stack = pip_extras(shell_commands(section("Distributed")))
    web_example = pip_extras(shell_commands(EXAMPLES_README.read_text()))
    assert stack == web_example, "README.md and examples/README.md must install one set of extras"


def test_those_extras_hold_the_stack_driver_and_what_the_web_example_runs_on() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    chosen = pip_extras(shell_commands(section("Distributed")))
    assert chosen <= set(extras), f"unknown extras {chosen - set(extras)}"
    packages = {re.split(r"[\[<>=!~ ;]", requirement)[0] for name in chosen for requirement in extras[name]}
    # psycopg: the stack's run store is PostgreSQL; the rest: examples/web_app.py and its server.
    needed = {"psycopg", "fastapi", "sse-starlette", "uvicorn"}
    assert needed <= packages, f"the README's extras {sorted(chosen)} do not install {sorted(needed - packages)}"


def test_system_deps_installs_the_servers_the_stack_starts() -> None:
    script = (ROOT / "ops" / "system-deps.sh").read_text()
    for package in ("redis-server", "postgresql"):
        assert re.search(rf"need\+=\({package}\)", script), f"ops/system-deps.sh does not install {package}"


def shell_commands(markdown: str) -> list[list[str]]:
    """The words of every ``lg``, ``pip`` and ``ops/`` command line in the ``sh`` blocks of ``markdown``
    (the others, such as a continued ``awk`` line, are left unparsed)."""
    blocks = re.findall(r"^```sh\n(.*?)^```$", markdown, re.MULTILINE | re.DOTALL)
    lines = [line for block in blocks for line in block.splitlines()]
    return [shlex.split(line, comments=True) for line in lines if re.match(r"(lg|pip|ops/\S+) ", line)]


def first_index(commands: list[list[str]], prefix: list[str]) -> int:
    found = [i for i, words in enumerate(commands) if words[: len(prefix)] == prefix]
    assert found, f"no `{' '.join(prefix)}` command"
    return found[0]


def pip_extras(commands: list[list[str]]) -> set[str]:
    """The extras of the one ``pip install -e '.[...]'`` among ``commands``."""
    installs = [words for words in commands if words[:2] == ["pip", "install"]]
    assert len(installs) == 1, f"expected one pip install, got {installs}"
    (target,) = [word for word in installs[0][2:] if word.startswith(".[")]
    return set(target.removeprefix(".[").removesuffix("]").split(","))
