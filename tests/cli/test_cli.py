"""The ``lg`` command line, driven in-process with Typer's CliRunner against SQLite file stores.

Runs are created by ``lg ask`` with the agents in ``cli_app`` (this folder);
a crashed run comes from a real child process that SIGKILLs itself
(``python -m lg_core.demo.crash``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import lg_core
from lg_core.cli import app
from lg_core.cli_output import ago, steps_table
from lg_core.demo import support
from lg_core.providers import scripted

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No store or imports from the developer's environment; ``cli_app`` importable."""
    for name in ("LG_RUN_STORE", "LG_IMPORTS", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.syspath_prepend(str(HERE))


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.fixture
def without_cli_models():
    """``cli_models`` not imported (its model unregistered) before and after the test."""
    sys.modules.pop("cli_models", None)
    scripted.unregister("cli-elsewhere")
    yield
    sys.modules.pop("cli_models", None)
    scripted.unregister("cli-elsewhere")


def lg(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def assert_usage_error(result, *fragments: str) -> None:
    """Exit code 2, one red line on stderr, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.output


def ask(store: str, target: str = "cli_app:EchoAgent", message: str = "hi", *extra: str):
    return lg("ask", target, message, "--store", store, *extra)


def crashed_run(store: str, tmp_path: Path, run_id: str = "crashed-1") -> Path:
    """A run left ``running`` by a child process killed with SIGKILL in its third tool call."""
    journal = tmp_path / "journal.log"
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "lg_core.demo.crash",
            "--store",
            store,
            "--journal",
            str(journal),
            "--run-id",
            run_id,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -9, child.stderr
    return journal


# -- ask ---------------------------------------------------------------------------------


def test_ask_into_a_file_writes_only_the_answer_to_stdout(store: str) -> None:
    """``lg ask ... > answer.txt`` keeps only the answer: the text before a tool call goes to stderr."""
    result = ask(store, "cli_app:LookupAgent", "When are you open?")  # CliRunner's stdout is no terminal
    assert result.exit_code == 0, result.output
    assert result.stdout == "We are open 9 to 5.\n"
    assert result.stderr.index("Checking.") < result.stderr.index('-> faq_lookup(topic="hours")')
    assert "ok Open 9:00-17:00" in result.stderr
    assert "completed run " in result.stderr
    assert "We are open" not in result.stderr


def test_ask_on_a_terminal_streams_the_text_as_it_arrives(store: str) -> None:
    """On a terminal the text before a tool call is shown in its place, on stdout, as it streams."""
    import pty

    primary, secondary = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(HERE), "COLUMNS": "200"}
    env.pop("FORCE_COLOR", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "lg_core.cli", "ask", "cli_app:LookupAgent", "When are you open?", "--store", store],
        stdout=secondary,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert child.stderr is not None
    os.close(secondary)
    terminal = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        terminal += chunk
    os.close(primary)
    assert child.wait(timeout=60) == 0, child.stderr.read()
    assert terminal.decode().replace("\r\n", "\n") == "Checking. \nWe are open 9 to 5.\n"
    assert '-> faq_lookup(topic="hours")' in child.stderr.read()
    child.stderr.close()


def test_runs_resume_into_a_file_writes_only_the_answer_to_stdout(store: str, tmp_path: Path) -> None:
    crashed_run(store, tmp_path)
    result = lg("runs", "resume", "crashed-1", "--store", store)
    assert result.exit_code == 0, result.output
    answer = json.loads(lg("runs", "show", "crashed-1", "--store", store, "--json").stdout)["response"]
    assert result.stdout == answer + "\n"


def test_ask_no_stream_prints_the_response(store: str) -> None:
    result = ask(store, "cli_app:LookupAgent", "When are you open?", "--no-stream")
    assert result.exit_code == 0, result.output
    assert result.stdout == "We are open 9 to 5.\n"
    assert "faq_lookup" not in result.stderr


def test_ask_records_context_actor_session_and_run_id(store: str) -> None:
    result = ask(
        store,
        "cli_app:EchoAgent",
        "hi",
        "--context",
        '{"tier": "gold"}',
        "--actor-id",
        "user-7",
        "--session-id",
        "sess-1",
        "--run-id",
        "run-abc",
    )
    assert result.exit_code == 0, result.output
    assert "completed run run-abc" in result.stderr
    shown = json.loads(lg("runs", "show", "run-abc", "--store", store, "--json").stdout)
    assert (shown["actor_id"], shown["session_id"], shown["status"]) == (
        "user-7",
        "sess-1",
        "completed",
    )
    assert shown["invocation"]["context"] == {"tier": "gold"}
    assert shown["response"] == "Hello from the echo agent."


def test_ask_without_a_store_runs_in_memory() -> None:
    result = lg("ask", "cli_app:EchoAgent", "hi")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Hello from the echo agent.\n"


def test_ask_exits_1_with_outcome_and_error_when_the_run_fails(store: str) -> None:
    result = ask(store, "cli_app:BrokenAgent")
    assert result.exit_code == 1
    assert "failed run " in result.stderr
    assert "ProviderError: the scripted provider is down" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("target", "fragments"),
    [
        ("no_such_module:Agent", ("cannot import module 'no_such_module'",)),
        (
            "cli_app:Missing",
            ("has no attribute 'Missing'", "agents and assemblies there: BrokenAgent, CliBillingAgent"),
        ),
        ("cli_app:NOT_AN_AGENT", ("is not an Agent, Workflow, Swarm or Graph subclass",)),
        ("cli_app:FaqLookupTool", ("is not an Agent, Workflow, Swarm or Graph subclass",)),
        ("lg_core:Agent", ("is the Agent base class", "name a subclass of it")),
        ("lg_core:Workflow", ("is the Workflow base class", "name a subclass of it")),
        ("cli_app", ("expected MODULE:CLASS",)),
    ],
)
def test_ask_rejects_bad_targets(store: str, target: str, fragments: tuple[str, ...]) -> None:
    assert_usage_error(ask(store, target), *fragments)


def test_ask_with_a_bad_target_creates_no_store_file(tmp_path: Path) -> None:
    """A typo in MODULE:CLASS must not leave an empty run store behind at the --store path."""
    path = tmp_path / "new.db"
    assert_usage_error(ask(f"sqlite:///{path}", "cli_app:Missing"), "has no attribute 'Missing'")
    assert not path.exists()


def test_ask_reports_a_module_that_fails_to_import(store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cli_broken_module.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert_usage_error(
        ask(store, "cli_broken_module:Agent"),
        "RuntimeError: boom at import",
        "cli_broken_module.py:1",
    )


@pytest.mark.parametrize(
    ("context", "fragment"),
    [("{not json", "--context is not valid JSON"), ("[1, 2]", "--context must be a JSON object")],
)
def test_ask_rejects_bad_context(store: str, context: str, fragment: str) -> None:
    assert_usage_error(ask(store, "cli_app:EchoAgent", "hi", "--context", context), fragment)


def test_ask_rejects_bad_input_before_a_run_exists(store: str) -> None:
    assert_usage_error(ask(store, "cli_app:EchoAgent", "   "), "message must not be blank")
    assert_usage_error(ask(store, "cli_app:EchoAgent", "hi", "--run-id", "bad id!"), "run_id must be")
    assert ask(store, "cli_app:EchoAgent", "hi", "--run-id", "once").exit_code == 0
    assert_usage_error(ask(store, "cli_app:EchoAgent", "hi", "--run-id", "once"), "already exists")


def test_import_option_and_lg_imports_register_models_first(store: str, without_cli_models) -> None:
    missing = ask(store, "cli_app:ElsewhereAgent")
    assert missing.exit_code == 1
    assert "no scripted model named 'cli-elsewhere'" in missing.stderr

    assert ask(store, "cli_app:ElsewhereAgent", "hi", "--import", "cli_models").stdout == "Registered by cli_models.\n"
    sys.modules.pop("cli_models")
    scripted.unregister("cli-elsewhere")
    result = lg("--import", "cli_models", "ask", "cli_app:ElsewhereAgent", "hi", "--store", store)
    assert result.exit_code == 0, result.output
    sys.modules.pop("cli_models")
    scripted.unregister("cli-elsewhere")
    assert lg("ask", "cli_app:ElsewhereAgent", "hi", env={"LG_IMPORTS": "cli_models"}).exit_code == 0


def test_unknown_import_module_is_a_usage_error(store: str) -> None:
    assert_usage_error(
        ask(store, "cli_app:EchoAgent", "hi", "--import", "no_such_app"),
        "no module named 'no_such_app'",
    )
    assert_usage_error(
        lg("ask", "cli_app:EchoAgent", "hi", env={"LG_IMPORTS": "no_such_app"}),
        "no_such_app",
        "named by $LG_IMPORTS",
    )


def test_an_unimportable_module_from_lg_yaml_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line does not mention it, so the error must say where it came from."""
    monkeypatch.delenv("LG_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lg.yaml").write_text("imports: [no_such_app]\n")
    assert_usage_error(
        lg("ask", "cli_app:EchoAgent", "hi"),
        "no module named 'no_such_app'",
        f"named by imports in {tmp_path / 'lg.yaml'}",
    )


# -- store selection -------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["list"], ["show", "x"], ["events", "x"], ["resume", "x"], ["cancel", "x"]])
def test_runs_commands_need_a_durable_store(command: list[str]) -> None:
    # A shell opened beside `lg stack up` needs the stack's env file, not a SQLite path.
    assert_usage_error(lg("runs", *command), "no run store configured", "--store sqlite:///", ". .lg/stack/env")


def test_an_emptied_lg_run_store_means_unset() -> None:
    """`export LG_RUN_STORE=` was read as the URL '' and reported as "--store '' is not a database URL"."""
    assert_usage_error(lg("runs", "list", env={"LG_RUN_STORE": ""}), "no run store configured")
    result = lg("ask", "cli_app:EchoAgent", "hi", env={"LG_RUN_STORE": ""})
    assert result.exit_code == 0, result.output  # the in-memory default


def test_a_bad_store_url_names_where_it_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It said "--store 'garbage' is not a database URL" when the command line had no --store."""
    assert_usage_error(lg("runs", "list", "--store", "garbage"), "(from --store)")
    assert_usage_error(lg("runs", "list", env={"LG_RUN_STORE": "garbage"}), "(from $LG_RUN_STORE)")
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    assert_usage_error(lg("runs", "list", env={"LG_RUN_STORE": missing}), "does not exist (check $LG_RUN_STORE)")
    monkeypatch.delenv("LG_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lg.yaml").write_text("run_store: garbage\n")
    assert_usage_error(lg("runs", "list"), f"(from run_store in {tmp_path / 'lg.yaml'})")


def test_store_comes_from_the_option_the_global_option_or_lg_run_store(store: str) -> None:
    assert ask(store, "cli_app:EchoAgent", "hi", "--run-id", "r1").exit_code == 0
    for result in (
        lg("runs", "list", "--store", store, "--json"),
        lg("--store", store, "runs", "list", "--json"),
        lg("runs", "list", "--json", env={"LG_RUN_STORE": store}),
    ):
        assert result.exit_code == 0, result.output
        assert [r["id"] for r in json.loads(result.stdout)] == ["r1"]


def test_bad_store_urls_are_usage_errors(tmp_path: Path) -> None:
    assert_usage_error(lg("runs", "list", "--store", "not a url"), "is not a database URL")
    assert_usage_error(lg("runs", "list", "--store", "mysql://db/runs"), "SQLite and PostgreSQL")
    assert_usage_error(lg("runs", "list", "--store", f"sqlite:///{tmp_path / 'missing.db'}"), "does not exist")
    assert not (tmp_path / "missing.db").exists()
    bad_dir = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}"
    assert_usage_error(
        lg("ask", "cli_app:EchoAgent", "hi", "--store", bad_dir),
        "cannot open the run store",
        f"the directory {tmp_path / 'no' / 'such'} does not exist",
    )
    assert_usage_error(
        lg("ask", "cli_app:EchoAgent", "hi", "--store", f"sqlite:///{tmp_path}"),
        "cannot open the run store",
        f"{tmp_path} is a directory",
    )


@pytest.mark.parametrize(
    "url", ["postgresql+psycopg://lg:s3cret@db.internal:abc/lg", "postgresql+psycopg://lg:s3cret@[::1/lg"]
)
@pytest.mark.parametrize("command", [("runs", "list"), ("ask", "cli_app:EchoAgent", "hi")])
def test_a_store_url_with_a_bad_port_is_a_usage_error(url: str, command: tuple[str, ...]) -> None:
    result = lg(*command, "--store", url)
    assert_usage_error(result, "is not a database URL", "port")
    assert "s3cret" not in result.output


@pytest.mark.parametrize(
    "command",
    [
        ("runs", "list"),
        ("runs", "show", "r1"),
        ("runs", "cancel", "r1"),
        ("runs", "resume", "r1"),
        ("ask", "cli_app:EchoAgent", "hi"),
    ],
)
def test_a_store_url_naming_another_apps_sqlite_database_changes_nothing_in_it(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """A typo in --store that names another application's database: refused, and no tables added to it."""
    import sqlite3
    from contextlib import closing

    other = tmp_path / "shop.db"
    with closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        db.commit()
    result = lg(*command, "--store", f"sqlite:///{other}")
    assert_usage_error(result, f"{other} is not a LittleGhost run store", "--store")
    with closing(sqlite3.connect(other)) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert tables == ["customers"]


def test_ask_makes_a_run_store_of_a_new_or_empty_sqlite_file(tmp_path: Path) -> None:
    """Only a file that already holds another database's tables is refused."""
    empty = tmp_path / "empty.db"
    empty.touch()
    for path in (empty, tmp_path / "new.db"):
        result = ask(f"sqlite:///{path}", "cli_app:EchoAgent", "hi", "--run-id", "r1")
        assert result.exit_code == 0, result.output
        listed = lg("runs", "list", "--store", f"sqlite:///{path}", "--json")
        assert [r["id"] for r in json.loads(listed.stdout)] == ["r1"]


def test_a_tilde_in_a_sqlite_store_url_is_the_home_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lg runs`` checked ~/runs.db unexpanded ("does not exist"), SQLite could not open it for ``lg ask``."""
    monkeypatch.setenv("HOME", str(tmp_path))
    url = "sqlite:///~/runs.db"
    result = ask(url, "cli_app:EchoAgent", "hi", "--run-id", "r1")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs.db").is_file() and not Path("~").exists()
    for listed in (
        lg("runs", "list", "--store", url, "--json"),
        lg("runs", "list", "--json", env={"LG_RUN_STORE": url}),
    ):
        assert listed.exit_code == 0, listed.output
        assert [r["id"] for r in json.loads(listed.stdout)] == ["r1"]
    assert_usage_error(
        lg("runs", "list", "--store", "sqlite:///~/missing.db"), f"no run store at {tmp_path / 'missing.db'}"
    )


def test_a_postgres_server_that_never_answers_is_a_usage_error_not_a_hang() -> None:
    """A port that accepts connections but never answers (a hung server, a dead port forward)."""
    import socket

    from lg_core.store.database import POSTGRES_CONNECT_TIMEOUT

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"postgresql+psycopg://lg@127.0.0.1:{silent.getsockname()[1]}/lg"
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "lg_core.cli", "runs", "list", "--store", url],
            capture_output=True,
            text=True,
            timeout=POSTGRES_CONNECT_TIMEOUT + 50,
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: cannot open the run store") and "timeout" in result.stderr
    assert time.monotonic() - started < POSTGRES_CONNECT_TIMEOUT + 20


# -- runs list / show / events ---------------------------------------------------------------


def test_runs_list_table_json_status_and_limit(store: str) -> None:
    assert ask(store, "cli_app:EchoAgent", "hi", "--run-id", "ok-1").exit_code == 0
    assert ask(store, "cli_app:BrokenAgent", "hi", "--run-id", "bad-1").exit_code == 1
    assert ask(store, "cli_app:LookupAgent", "hours?", "--run-id", "ok-2").exit_code == 0

    table = lg("runs", "list", "--store", store)
    assert table.exit_code == 0, table.output
    header, *rows = table.stdout.strip().splitlines()
    assert header.split() == ["ID", "ENTRYPOINT", "STATUS", "CREATED", "UPDATED", "RESPONSE"]
    assert [row.split()[0] for row in rows] == ["ok-2", "bad-1", "ok-1"]
    assert "cli_app:LookupAgent  completed" in rows[0] and "We are open 9 to 5." in rows[0]
    assert "failed" in rows[1] and "the scripted provider is down" in rows[1]
    assert "s ago" in rows[2]

    failed = json.loads(lg("runs", "list", "--store", store, "--status", "failed", "--json").stdout)
    assert [(r["id"], r["status"], r["error"]["name"]) for r in failed] == [("bad-1", "failed", "ProviderError")]
    limited = json.loads(lg("runs", "list", "--store", store, "--limit", "2", "--json").stdout)
    assert [r["id"] for r in limited] == ["ok-2", "bad-1"]
    assert_usage_error(lg("runs", "list", "--store", store, "--status", "done"), "--status must be one of")
    pending = lg("runs", "list", "--store", store, "--status", "pending")  # a status runs really have
    assert pending.exit_code == 0 and "no pending runs" in pending.stderr
    for args in (("runs", "list", "--limit", str(2**63)), ("runs", "events", "ok-1", "--after", str(2**63))):
        beyond = lg(*args, "--store", store)  # beyond the stores' integers: refused, no traceback
        assert beyond.exit_code == 2 and "Traceback" not in beyond.output


def test_runs_help_shows_no_storage_integer_limit() -> None:
    """The store's largest count (2**63 - 1) is checked but is no bound a reader needs in the help."""
    for command in (("runs", "list"), ("runs", "events")):
        help_text = lg(*command, "--help").stdout
        assert str(2**63 - 1) not in help_text, help_text
    assert "--limit N" in lg("runs", "list", "--help").stdout


def test_runs_list_says_when_the_store_is_empty(store: str) -> None:
    assert ask(store, "cli_app:EchoAgent").exit_code == 0
    result = lg("runs", "list", "--store", store, "--status", "running")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "no running runs in sqlite:///" in result.stderr


def test_runs_show_lists_outcome_steps_and_messages(store: str) -> None:
    assert ask(store, "cli_app:LookupAgent", "When are you open?", "--run-id", "shown").exit_code == 0
    result = lg("runs", "show", "shown", "--store", store)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for fragment in (
        "run        shown",
        "entrypoint  cli_app:LookupAgent",
        "status      completed",
        "outcome     completed",
        "message     When are you open?",
        "messages    4",
        "response    We are open 9 to 5.",
        "usage       ",
    ):
        assert fragment in out, fragment
    steps = [line.split()[:4] for line in out.splitlines() if line.startswith("root/")]
    assert steps == [  # ATTEMPTS counts workers' claims: "-" for steps this process ran itself
        ["root/turn-0/model", "model", "succeeded", "-"],
        ["root/turn-0/tool/call_0_0", "tool", "succeeded", "-"],
        ["root/turn-1/model", "model", "succeeded", "-"],
    ]
    assert 'faq_lookup(topic="hours")' in out
    shown = json.loads(lg("runs", "show", "shown", "--store", store, "--json").stdout)
    assert [step["attempts"] for step in shown["steps"]] == [0, 0, 0]


def test_ask_runs_a_graph_and_runs_show_lists_its_trajectory(store: str) -> None:
    result = ask(store, "cli_app:RoutingGraph", "Why was I charged twice?", "--run-id", "routed")
    assert result.exit_code == 0, result.output
    assert "A duplicate charge: refunded." in result.stdout

    shown = lg("runs", "show", "routed", "--store", store)
    assert shown.exit_code == 0, shown.output
    rows = shown.stdout.split("trajectory", 1)[1].splitlines()
    cells = [line.split()[:6] for line in rows if line.startswith(("triage-", "billing-"))]
    assert [row[:5] for row in cells] == [
        ["triage-1", "triage", "agent", "completed", "1"],
        ["billing-2", "billing", "agent", "completed", "1"],
    ]
    assert "triage-1" in rows[-1] and "A duplicate charge: refunded." in rows[-1]  # AFTER and OUTPUT

    data = json.loads(lg("runs", "show", "routed", "--store", store, "--json").stdout)
    assert [step["participant"] for step in data["trajectory"]] == ["triage", "billing"]


def test_runs_events_agents_lists_a_graphs_events_with_its_participants_under_their_path(store: str) -> None:
    assert ask(store, "cli_app:RoutingGraph", "Why was I charged twice?", "--run-id", "routed-ev").exit_code == 0

    own = json.loads(lg("runs", "events", "routed-ev", "--store", store, "--json").stdout)
    assert {event["type"] for event in own} >= {"invocation_start", "run_stop"}
    everything = json.loads(lg("runs", "events", "routed-ev", "--store", store, "--json", "--agents").stdout)
    agents = [event["agent"] for event in everything]
    assert agents.count("") == len(own)
    assert {"CliTriageAgent", "CliBillingAgent"} <= set(agents)
    triage_types = [event["type"] for event in everything if event["agent"] == "CliTriageAgent"]
    assert triage_types[0] == "invocation_start" and "invocation_stop" in triage_types
    assert max(agents.index("CliTriageAgent"), 0) < agents.index("CliBillingAgent")  # in time order

    table = lg("runs", "events", "routed-ev", "--store", store, "--agents")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["AGENT", "SEQ", "TIME", "TYPE", "DETAIL"]
    assert any(line.startswith("CliBillingAgent") and "invocation_start" in line for line in lines)


def test_ask_refuses_an_assembly_base_class_and_runs_an_assembly_in_a_session(store: str) -> None:
    assert_usage_error(lg("ask", "lg_core:Graph", "hi", "--store", store), "lg_core:Graph is the Graph base class")
    result = ask(store, "cli_app:RoutingGraph", "hi", "--session-id", "s-1", "--run-id", "in-session")
    assert result.exit_code == 0, result.output
    assert "A duplicate charge: refunded." in result.stdout
    shown = json.loads(lg("runs", "show", "in-session", "--store", store, "--json").stdout)
    assert shown["session_id"] == "s-1"


def test_runs_show_reports_the_error_of_a_failed_run(store: str) -> None:
    ask(store, "cli_app:BrokenAgent", "hi", "--run-id", "broken")
    result = lg("runs", "show", "broken", "--store", store)
    assert result.exit_code == 0
    assert "status      failed" in result.stdout
    assert "error       ProviderError: the scripted provider is down" in result.stdout


def test_runs_events_table_json_and_after(store: str) -> None:
    assert ask(store, "cli_app:LookupAgent", "When are you open?", "--run-id", "ev").exit_code == 0
    events = json.loads(lg("runs", "events", "ev", "--store", store, "--json").stdout)
    types = [e["type"] for e in events]
    assert types[0] == "invocation_start" and types[-1] == "run_stop"
    assert "tool_execution_stop" in types and "text_delta" not in types
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))

    later = json.loads(lg("runs", "events", "ev", "--store", store, "--json", "--after", "2").stdout)
    assert [e["seq"] for e in later] == [e["seq"] for e in events[2:]]

    table = lg("runs", "events", "ev", "--store", store)
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["SEQ", "TIME", "TYPE", "DETAIL"]
    assert any("run_stop" in line and "We are open 9 to 5." in line for line in lines)
    assert any("tool_execution_stop" in line and "faq_lookup success" in line for line in lines)


@pytest.mark.parametrize("command", ["show", "events", "resume", "cancel"])
def test_unknown_run_ids_are_usage_errors(store: str, command: str) -> None:
    assert ask(store).exit_code == 0
    assert_usage_error(lg("runs", command, "no-such-run", "--store", store), "no run with id 'no-such-run'")


# -- resume and cancel -----------------------------------------------------------------------


def test_runs_resume_finishes_a_run_whose_process_was_killed(store: str, tmp_path: Path) -> None:
    journal = crashed_run(store, tmp_path)
    before = lg("runs", "show", "crashed-1", "--store", store)
    assert "status      running" in before.stdout
    assert "process gone" in before.stdout
    assert "root/turn-2/tool/call_2_0  tool   scheduled" in before.stdout
    assert [
        r["id"] for r in json.loads(lg("runs", "list", "--status", "running", "--store", store, "--json").stdout)
    ] == ["crashed-1"]

    result = lg("runs", "resume", "crashed-1", "--store", store)
    assert result.exit_code == 0, result.output
    assert "resumed by " in result.stderr and "open steps: root/turn-2/tool/call_2_0" in result.stderr
    assert '-> help_center_lookup(topic="repairs")' in result.stderr
    assert "completed run crashed-1" in result.stderr
    assert result.stdout.startswith("Your blender is past the 30-day refund window")

    topics = [topic for topic, _pid in support.read_journal(str(journal))]
    assert topics == ["refunds", "warranty", "repairs", "repairs"]
    assert "status      completed" in lg("runs", "show", "crashed-1", "--store", store).stdout
    types = [e["type"] for e in json.loads(lg("runs", "events", "crashed-1", "--store", store, "--json").stdout)]
    assert "run_resumed" in types and types[-1] == "run_stop"

    again = lg("runs", "resume", "crashed-1", "--store", store)
    assert again.exit_code == 0
    assert "already finished: completed; nothing to resume" in again.stderr


def test_runs_resume_refuses_a_live_holder_and_takes_over_once_it_is_killed(store: str) -> None:
    env = {**os.environ, "CLI_SLOW_DELAY": "120", "PYTHONPATH": str(HERE)}
    command = [
        sys.executable,
        "-m",
        "lg_core.cli",
        "ask",
        "cli_app:SlowAgent",
        "hi",
        "--store",
        store,
        "--run-id",
        "held",
    ]
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_run(store, "held")
        refused = lg("runs", "resume", "held", "--store", store)
        assert_usage_error(refused, "still held by process", "--force")
        assert "alive or on another host" in lg("runs", "show", "held", "--store", store).stdout
    finally:
        child.kill()
        child.wait()
    assert "process gone" in lg("runs", "show", "held", "--store", store).stdout
    resumed = lg("runs", "resume", "held", "--store", store)
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout == "Done at last.\n"


def wait_for_run(store: str, run_id: str) -> None:
    """Poll until another process has created ``run_id`` in ``store`` (no timing assertion)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = lg("runs", "list", "--store", store, "--json")
        if listed.exit_code == 0 and run_id in [r["id"] for r in json.loads(listed.stdout)]:
            return
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} never appeared in {store}")


def test_runs_resume_of_a_finished_failed_run_exits_1(store: str) -> None:
    ask(store, "cli_app:BrokenAgent", "hi", "--run-id", "broken")
    result = lg("runs", "resume", "broken", "--store", store)
    assert result.exit_code == 1
    assert "already finished: failed" in result.stderr


def test_runs_cancel_then_resume_ends_the_run_cancelled(store: str, tmp_path: Path) -> None:
    crashed_run(store, tmp_path)
    cancelled = lg("runs", "cancel", "crashed-1", "--store", store)
    assert cancelled.exit_code == 0, cancelled.output
    assert "cancellation recorded for run crashed-1" in cancelled.stderr
    assert "is gone" in cancelled.stderr
    assert "(cancel requested)" in lg("runs", "show", "crashed-1", "--store", store).stdout

    resumed = lg("runs", "resume", "crashed-1", "--store", store)
    assert resumed.exit_code == 1
    assert "cancelled run crashed-1" in resumed.stderr
    assert json.loads(lg("runs", "show", "crashed-1", "--store", store, "--json").stdout)["status"] == "cancelled"


def test_runs_cancel_of_a_finished_run_changes_nothing(store: str) -> None:
    ask(store, "cli_app:EchoAgent", "hi", "--run-id", "done")
    result = lg("runs", "cancel", "done", "--store", store)
    assert result.exit_code == 0
    assert "already finished: completed; nothing to cancel" in result.stderr
    assert json.loads(lg("runs", "show", "done", "--store", store, "--json").stdout)["cancel_requested"] is False


# -- the program itself ----------------------------------------------------------------------


def test_version_and_help() -> None:
    assert lg("--version").stdout.startswith("lg (littleghost) ")
    help_text = lg("--help").stdout
    for command in ("demo", "ask", "runs"):
        assert command in help_text
    runs_help = lg("runs", "--help").stdout
    for command in ("list", "show", "events", "resume", "cancel"):
        assert command in runs_help


def test_python_dash_m_lg_core_cli_works(store: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lg_core.cli",
            "runs",
            "show",
            "nope",
            "--store",
            store.replace("runs.db", "none.db"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: no run store at ")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(5, "5s ago"), (125, "2m ago"), (3 * 3600 + 5, "3h ago"), (2 * 86400, "2d ago")],
)
def test_ago_is_human(seconds: int, text: str) -> None:
    assert ago(1_000_000.0, now=1_000_000.0 + seconds) == text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("worker", "--queues", ","), "error: --queues is empty"),
        (("runs", "fork", "r1", "--from-step", "x", "--setting", "novalue"), "error: --setting expects KEY=VALUE"),
    ],
)
def test_python_dash_m_lg_core_cli_maps_plugin_usage_errors(args: tuple[str, ...], message: str) -> None:
    """Under ``python -m`` the module runs as ``__main__``: the plugins' usage errors must still be one line."""
    result = subprocess.run([sys.executable, "-m", "lg_core.cli", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr


def test_steps_table_counts_attempts_only_for_steps_workers_claimed() -> None:
    """A local step is never claimed, so its attempts stay 0: shown as "-", not as "ran 0 times"."""
    from rich.console import Console

    from lg_core.store.records import StepRecord

    def step(key: str, status: str, attempts: int) -> StepRecord:
        return StepRecord("r1", key, "f1", "model", status, None, None, None, attempts, None, None, 0.0, None, None)

    console = Console(width=120, record=True)
    console.print(
        steps_table([step("local", "succeeded", 0), step("claimed", "succeeded", 2), step("queued", "scheduled", 0)])
    )
    rows = [line.split()[:4] for line in console.export_text().splitlines()[1:]]
    assert rows == [
        ["local", "model", "succeeded", "-"],
        ["claimed", "model", "succeeded", "2"],
        ["queued", "model", "scheduled", "-"],
    ]


def test_a_misspelled_setting_variable_is_one_warning_line(tmp_path: Path) -> None:
    env = {**os.environ, "LG_RUNSTORE": f"sqlite:///{tmp_path / 'meant.db'}"}
    env.pop("LG_RUN_STORE", None)
    result = subprocess.run(
        [sys.executable, "-m", "lg_core.cli", "runs", "list"], capture_output=True, text=True, env=env, timeout=60
    )
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "warning: $LG_RUNSTORE is not a LittleGhost setting and is ignored; did you mean $LG_RUN_STORE?"
    assert lines[1].startswith("error: no run store configured")  # the warning explains the error after it


def test_a_store_that_goes_away_mid_command_is_one_line_and_exit_75(store: str, monkeypatch) -> None:
    """Not a usage error (2) and no traceback: EX_TEMPFAIL, the same command works once the database is back."""
    from lg_core.errors import StoreUnavailableError
    from lg_core.store import RunStore

    def down(*_args, **_kwargs):
        raise StoreUnavailableError("the store's database could not be reached for 6.1 s (12 tries)")

    assert ask(store, "cli_app:EchoAgent", "hi").exit_code == 0
    monkeypatch.setattr(RunStore, "list_runs", down)

    result = lg("runs", "list", "--store", store)

    assert result.exit_code == 75, (result.exit_code, result.output)
    assert result.stderr.strip().splitlines() == [
        "error: the store's database could not be reached for 6.1 s (12 tries)"
    ]
    assert "Traceback" not in result.output


ABANDONING_SCRIPT = """
import sys
import lg_core
from lg_core import Agent
from lg_core.providers import scripted

lg_core.configure(run_store=sys.argv[1])
scripted.register("abandoned", lambda request: {"text": "w " * 50, "delta_delay": 0.2})

class ScriptAgent(Agent):  # defined in __main__: no other process can import it
    model = "scripted:abandoned"

ScriptAgent.start_execution("go", run_id="abandoned", session_id="conv", actor_id="u")
"""


def test_a_cancelled_run_whose_script_exited_ends_on_resume_without_importing_its_agent(
    store: str, tmp_path: Path
) -> None:
    """`lg runs cancel` says `lg runs resume` will end such a run as cancelled; resume imported the
    agent first, which a script's __main__ agent never is, so the run (and its session) stayed stuck."""
    script = tmp_path / "abandon.py"
    script.write_text(ABANDONING_SCRIPT)
    subprocess.run([sys.executable, str(script), store], check=True, timeout=60)
    cancelled = lg("runs", "cancel", "abandoned", "--store", store)
    assert "`lg runs resume abandoned` will end it as cancelled" in cancelled.stderr, cancelled.output

    resumed = lg("runs", "resume", "abandoned", "--store", store)

    assert "cancelled run abandoned: CancelledError: the run was cancelled while its process was gone" in resumed.output
    configuration = lg_core.Configuration(run_store=store)
    try:
        assert configuration.runtime().store.load_run("abandoned").status == "cancelled"
    finally:
        configuration.close()
