"""Fixtures for the sandbox tests: workspaces, and Bubblewrap sandboxes on the real bwrap.

A worker running as root gets no process-count limit from the kernel (RLIMIT_NPROC
does not bind root), so the tests that need one run the sandbox as ``nobody``
(``host_user``), with a workspace that user owns.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from lg_core.sandbox import Sandbox
from lg_core.sandboxes import Bubblewrap
from lg_core.workspace import Workspace

NOBODY = 65534
PYTHON = "/usr/bin/python3"

_PROBE = Sandbox.probe("bubblewrap")
requires_bwrap = pytest.mark.skipif(
    not _PROBE.available or not os.path.exists(PYTHON), reason=f"bubblewrap unavailable: {_PROBE.reason}"
)


@pytest.fixture
def workspace(tmp_path):
    ws = Workspace(
        root=tmp_path / "root",
        paths={"source": tmp_path / "source", "out": "out"},
        setup=lambda workspace, run: os.makedirs(tmp_path / "source", exist_ok=True),
    )
    ws.open()
    yield ws
    ws.close()


@pytest.fixture
def outside(tmp_path):
    """A secret file beside the workspace, never granted to a sandbox."""
    directory = tmp_path / "outside"
    directory.mkdir()
    secret = directory / "secret.txt"
    secret.write_text("top secret")
    return secret


@pytest.fixture
def bwrap(workspace):
    """An open Bubblewrap sandbox over ``workspace``: root read-write, source read-only, no network."""
    sandbox = Bubblewrap(
        workspace=workspace,
        policy={"files": {"root": "read_write", "source": "read_only"}, "network": "none"},
    ).open()
    yield sandbox
    sandbox.close()


@pytest.fixture
def unprivileged_workspace():
    """A workspace the sandbox user can use when the tests run as root (under a traversable /tmp dir)."""
    base = Path(tempfile.mkdtemp(prefix="lg-sandbox-test-"))
    root = base / "root"
    root.mkdir()
    if os.geteuid() == 0:
        os.chmod(base, 0o755)
        os.chown(root, NOBODY, NOBODY)
    ws = Workspace(root=root).open()
    yield ws
    ws.close()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def unprivileged_bwrap(unprivileged_workspace):
    """A Bubblewrap sandbox whose processes run as a non-root user, so process limits apply."""
    host_user = NOBODY if os.geteuid() == 0 else None
    sandbox = Bubblewrap(
        workspace=unprivileged_workspace,
        policy={"files": {"root": "read_write"}, "network": "none"},
        host_user=host_user,
    ).open()
    yield sandbox
    sandbox.close()


def python(code: str) -> list[str]:
    """The argv running ``code`` with the system Python inside a sandbox."""
    return [PYTHON, "-c", code]


def errno_probe(statement: str) -> str:
    """Python that runs ``statement`` and prints ``ok`` or the errno name it failed with."""
    return (
        "import errno, os, socket\n"
        "try:\n"
        f"    {statement}\n"
        "    print('ok')\n"
        "except OSError as error:\n"
        "    print(errno.errorcode.get(error.errno, error))\n"
    )


def live_processes_with(marker):
    """Pids of running (not zombie) processes whose command line contains ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    cmdline = handle.read()
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    state = handle.read().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmdline and state != b"Z":
                found.append(int(entry))
    return found
