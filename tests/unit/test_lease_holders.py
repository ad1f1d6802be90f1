"""Lease holders: a holder is judged dead at once only when this process can be sure of it.

A wrong "dead" re-runs a step that is still running (an ``at_most_once`` tool
reported "outcome unknown" while it runs); a wrong "alive" only waits for the
lease. So anything this process cannot check leans to "alive".
"""

from __future__ import annotations

import os
import subprocess
import sys

from lg_core import lease_holders
from lg_core.lease_holders import current_holder, holder_is_dead, holder_is_local, hostname


def test_this_process_is_alive_and_a_finished_child_is_dead():
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert not holder_is_dead(current_holder())
    assert holder_is_dead(f"{hostname()}:{int(child.stdout)}:1")  # gone (or its pid reused: another start time)


def test_a_holder_in_another_pid_namespace_with_the_same_host_name_is_not_judged_here():
    """A container sharing the host's name (network_mode: host) has pids of its own."""
    name = hostname().partition("#")[0]
    assert hostname() != name, "this host reads its PID namespace from /proc/self/ns/pid"
    assert not holder_is_dead(f"{name}#1:{2**22 + 17}:1")
    assert not holder_is_dead(f"{name}:{2**22 + 17}:1")


def test_a_process_that_proc_hides_from_us_is_alive(monkeypatch):
    """With /proc mounted hidepid=2, another user's worker has no /proc entry, yet it runs."""
    real_open = open

    def hidden(path, *args, **kwargs):
        if str(path) == "/proc/1/stat":
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", hidden)
    assert os.path.exists("/proc/1")  # pid 1 exists; kill(1, 0) says so even when /proc would not
    assert lease_holders.process_start_time(1) == lease_holders._UNREADABLE
    assert not holder_is_dead(f"{hostname()}:1:12345")


def test_a_process_whose_start_time_psutil_cannot_read_is_alive(monkeypatch):
    """hidepid=2 hides another user's process (NoSuchProcess although it runs); macOS may deny access."""
    import psutil

    for error in (psutil.NoSuchProcess(1), psutil.AccessDenied(1)):

        def refuse(pid, error=error):
            raise error

        monkeypatch.setattr(psutil, "Process", refuse)
        assert lease_holders.process_start_time(1) == lease_holders._UNREADABLE
        assert not holder_is_dead(f"{hostname()}:1:12345")


def test_the_start_time_is_procs_clock_ticks_since_boot():
    """The holder strings of processes that read /proc themselves name the same incarnation."""
    with open("/proc/self/stat", "rb") as handle:
        ticks = handle.read().rsplit(b")", 1)[1].split()[19].decode()
    assert lease_holders.process_start_time(os.getpid()) == ticks


def test_only_a_holder_on_this_host_is_local_so_its_pid_can_be_checked():
    assert holder_is_local(current_holder())
    assert holder_is_local(f"{hostname()}:1:1")
    assert not holder_is_local("another-host:1:1")
    assert not holder_is_local(None) and not holder_is_local("")
