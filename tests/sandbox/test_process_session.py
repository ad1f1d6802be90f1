"""ProcessSession through the Unrestricted and Bubblewrap backends: duplex I/O, waiting, termination, cleanup."""

from __future__ import annotations

import os
import sys
import time
import uuid

import pytest

from lg_core.errors import CancelledError, SandboxLimitError
from lg_core.sandbox import ProcessSession
from lg_core.sandboxes import Unrestricted
from tests.sandbox.conftest import live_processes_with, python, requires_bwrap


@pytest.fixture
def host(workspace):
    with Unrestricted(workspace=workspace, policy={"files": {"root": "read_write"}}) as sandbox:
        yield sandbox


def read_until(session, text, seconds=10):
    output = b""
    deadline = time.monotonic() + seconds
    while text not in output and time.monotonic() < deadline:
        output += session.read(timeout=0.5)
    return output


def test_a_session_is_duplex(host):
    with host.start_program(["cat"]) as session:
        session.write("hello\n")
        assert read_until(session, b"hello") == b"hello\n"
        session.close_write()
        assert session.wait(timeout=5) == 0
        assert not session.alive


def test_unrestricted_children_start_in_the_root_with_a_scrubbed_environment(host, workspace, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    result = host.execute_program(
        [sys.executable, "-c", "import os; print(os.getcwd()); print(dict(os.environ))"],
        timeout=10,
        environment={"EXTRA": "1"},
    )
    cwd, environment = result.stdout.splitlines()
    assert cwd == workspace.real_path("root")
    assert "sk-should-not-leak" not in environment and "'EXTRA': '1'" in environment
    assert "LITTLE_GHOST_WORKSPACE_ROOT" in environment


def test_waiting_past_the_timeout_stops_the_process_group(host):
    session = host.start_program(["sleep", "60"])
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within 0.2 seconds"):
        session.wait(timeout=0.2)
    assert time.monotonic() - started < 5
    assert not session.alive
    session.close()
    session.close()


def test_waiting_without_terminating_leaves_the_process_running(host):
    with host.start_program(["sleep", "60"]) as session:
        with pytest.raises(TimeoutError):
            session.wait(timeout=0.1, terminate=False)
        assert session.alive
    assert not session.alive


def test_a_cancelled_context_stops_the_process_and_raises(host):
    class Cancelled:
        def check(self):
            raise CancelledError("the run was cancelled")

    session = host.start_program(["sleep", "60"])
    with pytest.raises(CancelledError):
        session.wait(timeout=10, context=Cancelled())
    assert not session.alive
    session.close()


def test_a_process_ignoring_sigterm_is_killed(host):
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    )
    session = host.start_program([sys.executable, "-c", code])
    assert b"ready" in read_until(session, b"ready")
    assert session.terminate() == -9
    session.close()


def test_closing_ends_the_children_left_in_the_process_group(host):
    marker = f"lg-group-{uuid.uuid4().hex}"
    sleeper = f"[sys.executable, '-c', 'import time; time.sleep(300)', '{marker}']"
    child = f"import subprocess, sys, time; subprocess.Popen({sleeper})"
    code = f"{child}; print('ok', flush=True); time.sleep(300)"
    session = host.start_program([sys.executable, "-c", code])
    assert b"ok" in read_until(session, b"ok")
    deadline = time.monotonic() + 5
    while not live_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_processes_with(marker)
    session.close()
    assert not session.alive
    assert live_processes_with(marker) == []


def test_a_failed_memory_sample_three_times_in_a_row_ends_the_process(workspace):
    def unreadable(pid):
        raise OSError("no /proc here")

    session = ProcessSession(["sleep", "60"], memory_bytes=1 << 30, memory_reader=unreadable)
    deadline = time.monotonic() + 5
    with pytest.raises(SandboxLimitError, match="could not read the process tree") as raised:
        while time.monotonic() < deadline:
            session.alive  # noqa: B018 - alive raises once supervision has failed
            time.sleep(0.05)
    assert raised.value.limit == "supervision"
    session.close()


def test_memory_over_the_limit_in_a_sample_ends_the_process(workspace):
    session = ProcessSession(["sleep", "60"], memory_bytes=1000, memory_reader=lambda pid: 5000)
    with pytest.raises(SandboxLimitError, match="5000 bytes went past the limit of 1000") as raised:
        session.wait(timeout=5)
    assert raised.value.limit == "memory_bytes" and raised.value.observed == 5000
    session.close()


def test_stderr_is_read_separately_and_output_is_bounded_across_both_streams():
    code = "import sys; sys.stdout.write('o' * 600); sys.stdout.flush(); sys.stderr.write('e' * 600)"
    with ProcessSession([sys.executable, "-c", code], output_bytes=1000) as session:
        session.wait(timeout=10)
        stdout, stderr = session.drain()
        assert len(stdout) + len(stderr) == 1000
        assert session.output_truncated


def test_a_session_starts_with_an_empty_environment_by_default(monkeypatch):
    monkeypatch.setenv("LG_SECRET", "x")
    with ProcessSession([sys.executable, "-c", "import os; print(sorted(os.environ))"]) as session:
        session.wait(timeout=10)
        assert "LG_SECRET" not in session.drain()[0].decode()


@requires_bwrap
def test_a_bubblewrap_session_is_duplex_and_owned(bwrap):
    session = bwrap.start_program(python("import sys\nfor line in sys.stdin: print(line.upper(), end='', flush=True)"))
    session.write(b"ping\n")
    assert read_until(session, b"PING") == b"PING\n"
    assert session.alive
    session.close()
    assert not session.alive
    assert not os.path.exists(f"/proc/{session.pid}")


def test_a_call_cannot_raise_the_sandboxs_output_bound(workspace):
    with Unrestricted(workspace=workspace, limits={"output_bytes": 10}) as sandbox:
        result = sandbox.execute_program([sys.executable, "-c", "print('x' * 100)"], timeout=10, max_output_bytes=1000)
    assert result.stdout == "x" * 10 and result.stdout_truncated


def test_writing_to_a_child_that_never_reads_times_out_instead_of_blocking(host):
    with host.start_program(["sleep", "60"]) as session:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="did not read its input within 0.5 seconds"):
            session.write(b"x" * 4_000_000, timeout=0.5)
        assert time.monotonic() - started < 5


def test_a_large_write_reaches_a_reading_child_whole(host):
    code = "import sys; print(len(sys.stdin.buffer.read()))"
    with host.start_program([sys.executable, "-c", code]) as session:
        assert session.write(b"y" * 3_000_000, timeout=30) == 3_000_000
        session.close_write()
        session.wait(timeout=30)
        assert session.drain()[0].strip() == b"3000000"
