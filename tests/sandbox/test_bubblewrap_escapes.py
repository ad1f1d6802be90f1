"""Escape attempts against the Bubblewrap backend on the real bwrap, each asserting how it failed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid

from lg_core.errors import SandboxLimitError
from lg_core.sandboxes import Bubblewrap
from tests.sandbox.conftest import errno_probe, live_processes_with, python, requires_bwrap

pytestmark = requires_bwrap


def run(sandbox, code, **options):
    options.setdefault("timeout", 30)
    return sandbox.execute_program(python(code), **options)


def test_a_file_outside_the_granted_paths_does_not_exist_for_the_child(bwrap, outside):
    result = run(bwrap, errno_probe(f"open({str(outside)!r}).read()"))
    assert result.stdout.strip() == "ENOENT", result
    host_files = run(bwrap, errno_probe("open('/etc/shadow').read()"))
    assert host_files.stdout.strip() == "ENOENT", host_files


def test_a_read_only_path_refuses_writes_with_a_read_only_filesystem(bwrap, workspace):
    source = workspace.real_path("source")
    result = run(bwrap, errno_probe(f"open({source + '/planted.txt'!r}, 'w').write('x')"))
    assert result.stdout.strip() == "EROFS", result
    assert not os.path.exists(os.path.join(source, "planted.txt"))


def test_a_read_write_directory_nested_in_a_read_only_one_stays_read_only(workspace):
    with Bubblewrap(workspace=workspace, policy={"files": {"root": "read_only", "out": "read_write"}}) as sandbox:
        result = run(sandbox, errno_probe("open('out/x.txt', 'w').write('x')"))
    assert result.stdout.strip() == "EROFS", result


def test_the_runtime_roots_are_read_only(bwrap):
    result = run(bwrap, errno_probe("open('/usr/planted', 'w')"))
    assert result.stdout.strip() == "EROFS", result


def test_a_symlink_pointing_out_of_the_workspace_leads_nowhere(bwrap, workspace, outside):
    os.symlink(outside.parent, os.path.join(workspace.real_path("root"), "escape"))
    os.symlink("/etc/shadow", os.path.join(workspace.real_path("root"), "shadow"))
    through_directory = run(bwrap, errno_probe("open('escape/secret.txt').read()"))
    assert through_directory.stdout.strip() == "ENOENT", through_directory
    to_host_file = run(bwrap, errno_probe("open('shadow').read()"))
    assert to_host_file.stdout.strip() == "ENOENT", to_host_file


def test_a_socket_has_no_route_out_with_network_none(bwrap):
    result = run(bwrap, errno_probe("socket.create_connection(('1.1.1.1', 53), timeout=5)"))
    assert result.stdout.strip() == "ENETUNREACH", result


def test_the_hosts_loopback_services_are_unreachable_with_network_none(bwrap):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        result = run(bwrap, errno_probe(f"socket.create_connection(('127.0.0.1', {port}), timeout=5)"))
    assert result.stdout.strip() == "ECONNREFUSED", result


def test_a_fork_bomb_stops_at_the_process_limit(unprivileged_bwrap):
    code = (
        "import errno, os, time\n"
        "count = 0\n"
        "try:\n"
        "    for _ in range(500):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(5)\n"
        "            os._exit(0)\n"
        "        count += 1\n"
        "    print('unbounded', count)\n"
        "except OSError as error:\n"
        "    print(errno.errorcode[error.errno], count)\n"
    )
    result = run(unprivileged_bwrap, code, processes=12)
    failure, count = result.stdout.split()
    assert failure == "EAGAIN", result
    assert int(count) < 12


def test_allocating_past_the_memory_limit_ends_the_program(bwrap):
    code = (
        "import time\n"
        "chunks = []\n"
        "for _ in range(60):\n"
        "    chunks.append(b'x' * (10 * 1024 * 1024))\n"
        "    time.sleep(0.05)\n"
        "print('allocated 600 MB')\n"
    )
    result = run(bwrap, code, memory_bytes=100 * 1024 * 1024)
    assert isinstance(result.error, SandboxLimitError), result
    assert result.error.limit == "memory_bytes"
    assert "allocated" not in result.stdout
    assert not result.success


def test_writing_past_the_file_size_limit_fails_with_file_too_large(bwrap, workspace):
    code = errno_probe("open('big.bin', 'wb').write(b'x' * 2_000_000)")
    result = run(bwrap, code, file_bytes=1_000_000)
    assert result.stdout.strip() == "EFBIG", result
    assert os.path.getsize(os.path.join(workspace.real_path("root"), "big.bin")) == 1_000_000


def test_cpu_time_past_the_limit_ends_the_program_with_a_signal(bwrap):
    started = time.monotonic()
    result = run(bwrap, "while True: pass", cpu_seconds=1, timeout=20)
    assert result.exit_code in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL), result
    assert result.error is None
    assert time.monotonic() - started < 10


def test_no_descendant_survives_closing_the_session(bwrap):
    marker = f"lg-orphan-{uuid.uuid4().hex}"
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/usr/bin/python3', ['python3', '-c', 'import time; time.sleep(300)', {marker!r}])\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n"
        "print('started', flush=True)\n"
        "time.sleep(300)\n"
    )
    session = bwrap.start_program(python(code))
    output = b""
    deadline = time.monotonic() + 20
    while b"started" not in output and time.monotonic() < deadline:
        output += session.read(timeout=1)
    assert b"started" in output
    assert live_processes_with(marker), "the detached grandchild should be running before close"
    session.close()
    deadline = time.monotonic() + 5
    while live_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_processes_with(marker) == []
    assert not session.alive


def test_the_workers_environment_and_api_keys_are_not_visible(bwrap, monkeypatch):
    secret = f"sk-ant-{uuid.uuid4().hex}"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    monkeypatch.setenv("LG_DATABASE_URL", f"postgresql://user:{secret}@db/lg")
    code = (
        "import os\n"
        "seen = [repr(dict(os.environ))]\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        try:\n"
        "            seen.append(open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace'))\n"
        "        except OSError:\n"
        "            pass\n"
        "print(len(os.listdir('/proc')), os.getppid())\n"
        "print('\\n'.join(seen))\n"
    )
    result = run(bwrap, code)
    assert result.exit_code == 0, result
    assert secret not in result.stdout
    assert "ANTHROPIC_API_KEY" not in result.stdout
    assert str(os.getpid()) not in result.stdout.split("\n")[0].split()
    environment = run(bwrap, "import os; print(sorted(os.environ))").stdout
    assert "LITTLE_GHOST_WORKSPACE_ROOT" in environment and "LG_DATABASE_URL" not in environment


def test_a_program_past_its_timeout_is_stopped_and_reported(bwrap):
    started = time.monotonic()
    result = run(bwrap, "import time; time.sleep(60)", timeout=0.5)
    assert isinstance(result.error, TimeoutError), result
    assert time.monotonic() - started < 10


def test_output_past_the_capture_limit_is_dropped_and_reported(bwrap):
    result = run(bwrap, "print('x' * 100_000)", max_output_bytes=1000)
    assert len(result.stdout) == 1000
    assert result.stdout_truncated and not result.stderr_truncated


def test_the_child_holds_no_capabilities_even_when_the_worker_is_root(bwrap, workspace):
    status = run(bwrap, "print(open('/proc/self/status').read())").stdout
    capabilities = dict(line.split(":\t") for line in status.splitlines() if line.startswith("Cap"))
    assert {capabilities[name].strip() for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {
        "0000000000000000"
    }
    source = workspace.real_path("source")
    remount = f"import subprocess; subprocess.run(['mount', '-o', 'remount,rw', {source!r}])\n"
    after = run(bwrap, remount + errno_probe(f"open({source + '/x'!r}, 'w')"))
    assert after.stdout.strip() == "EROFS", after


def test_a_child_starts_in_a_granted_subdirectory_and_sees_its_workspace_variables(bwrap, workspace):
    result = bwrap.execute_program(python("import os; print(os.getcwd())"), timeout=30, cwd="out")
    assert result.stdout.strip() == workspace.real_path("out")
    variables = run(bwrap, "import os; print(os.environ['LITTLE_GHOST_WORKSPACE_SOURCE'])").stdout.strip()
    assert variables == workspace.real_path("source")


EXEC_SCRIPT = """
import sys
from lg_core.sandboxes import Bubblewrap
from lg_core.workspace import Workspace

workspace = Workspace(root=sys.argv[1]).open()
limits = {"memory_bytes": 10**8} if sys.argv[2] == "memory" else {}
sandbox = Bubblewrap(workspace=workspace, policy={"files": {"root": "read_write"}}, limits=limits).open()
try:
    sandbox.exec_program(["/usr/bin/python3", "-c", "import os; print('exec', os.getcwd(), os.getppid())"])
except Exception as error:
    print(type(error).__name__, error)
"""


def test_exec_program_replaces_the_process_with_the_confined_command(tmp_path):
    ran = subprocess.run(
        [sys.executable, "-c", EXEC_SCRIPT, str(tmp_path / "root"), "plain"], capture_output=True, text=True, timeout=60
    )
    assert ran.stdout.split() == ["exec", str(tmp_path / "root"), "1"], ran
    refused = subprocess.run(
        [sys.executable, "-c", EXEC_SCRIPT, str(tmp_path / "root"), "memory"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.stdout.startswith("CapabilityError exec_program replaces the process"), refused


def test_a_read_only_host_root_shows_host_files_but_takes_writes_only_in_granted_paths(workspace, outside):
    policy = {"files": {"root": "read_write"}, "root_filesystem": "read_only"}
    with Bubblewrap(workspace=workspace, policy=policy, masks=[str(outside.parent)]) as sandbox:
        host = run(sandbox, errno_probe("open('/etc/passwd').read()"))
        masked = run(sandbox, errno_probe(f"open({str(outside)!r}).read()"))
        host_write = run(sandbox, errno_probe("open('/etc/lg-planted', 'w')"))
        granted_write = run(sandbox, errno_probe("open('granted.txt', 'w').write('x')"))
    assert host.stdout.strip() == "ok", host
    assert masked.stdout.strip() == "ENOENT", masked
    assert host_write.stdout.strip() == "EROFS", host_write
    assert granted_write.stdout.strip() == "ok", granted_write


def test_a_read_write_host_root_is_host_authority(workspace, outside):
    with Bubblewrap(workspace=workspace, policy={"root_filesystem": "read_write"}) as sandbox:
        result = run(sandbox, errno_probe(f"open({str(outside.parent / 'written.txt')!r}, 'w').write('x')"))
    assert result.stdout.strip() == "ok", result
    assert (outside.parent / "written.txt").read_text() == "x"


def test_the_identity_inside_the_namespace_is_configurable(workspace):
    with Bubblewrap(workspace=workspace, uid=1000, gid=1000) as sandbox:
        result = run(sandbox, "import os; print(os.getuid(), os.getgid())")
    assert result.stdout.split() == ["1000", "1000"], result
