"""Policy normalization, Scopes that can only narrow, and backends that refuse what they cannot enforce."""

from __future__ import annotations

import os

import pytest

from lg_core.errors import (
    CapabilityError,
    DependencyError,
    PolicyError,
    SandboxConfigurationError,
    UnsupportedPlatformError,
)
from lg_core.sandbox import Capabilities, EnvironmentPolicy, Limits, NetworkPolicy, Policy, Sandbox
from lg_core.sandboxes import Bubblewrap, Native, Unrestricted
from lg_core.workspace import Workspace
from tests.sandbox.conftest import errno_probe, python, requires_bwrap


def test_a_policy_has_secure_defaults():
    policy = Policy()
    assert dict(policy.files) == {"root": "read_only"}
    assert policy.root_filesystem == "isolated"
    assert policy.environment == EnvironmentPolicy(inherit=False)
    assert policy.network is None
    assert not policy.workspace_writable


def test_a_policy_is_built_from_a_mapping():
    policy = Policy.coerce(
        {
            "files": {"root": "read_write", "source": "read_only"},
            "runtime_paths": {"home": "read_write"},
            "environment": {"inherit": False, "set": {"LANG": "C.UTF-8"}},
            "network": "none",
        }
    )
    assert policy.workspace_writable
    assert policy.environment.to_h() == {"LANG": "C.UTF-8"}
    assert policy.network == NetworkPolicy("none") and policy.network.none


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"file": {}}, "unknown sandbox policy keys"),
        ({"files": {"root": "rw"}}, "must be 'read_only' or 'read_write'"),
        ({"files": "root"}, "must map path names"),
        ({"root_filesystem": "none"}, "root_filesystem must be one of"),
        ({"files": {"a": "read_only"}, "runtime_paths": {"a": "read_only"}}, "in both files and runtime_paths"),
        ({"network": "internet"}, "network mode must be one of"),
        ({"network": True}, "ambiguous"),
        ({"network": {"mode": "allowlist"}}, "at least one allowed endpoint"),
        ({"network": {"mode": "none", "allow": ["example.com"]}}, "takes no allowed endpoints"),
        ({"network": {"allow": ["not a host!"]}}, "no valid host name"),
        ({"network": {"allow": ["example.com:99999"]}}, "no valid port"),
        ({"environment": {"inherit": "yes"}}, "inherit must be True or False"),
        ({"environment": {"set": {"A=B": "x"}}}, "not a valid environment name"),
        ({"environment": {"set": {"A": None}}}, "must be a string"),
        ({"environment": {"shell": True}}, "unknown environment policy keys"),
    ],
)
def test_an_invalid_policy_is_refused_with_a_policy_error(options, match):
    with pytest.raises(PolicyError, match=match):
        Policy.coerce(options)


def test_allowlist_endpoints_are_normalized():
    policy = NetworkPolicy.coerce({"allow": ["API.example.com", "example.org:8443", {"host": "x.io", "port": 80}]})
    assert policy.allow == ("api.example.com:443", "example.org:8443", "x.io:80")
    assert policy.allowlist


@pytest.mark.parametrize(
    ("values", "match"),
    [({"output_bytes": 0}, "positive integer"), ({"memory_bytes": -1}, "positive integer"), ({"disk": 1}, "unknown")],
)
def test_invalid_limits_are_refused(values, match):
    with pytest.raises(PolicyError, match=match):
        Limits.coerce(values)


def test_a_call_can_only_tighten_the_sandbox_limits():
    limits = Limits(memory_bytes=100, cpu_seconds=10)
    narrowed = limits.narrowed(memory_bytes=500, cpu_seconds=2, file_bytes=7)
    assert (narrowed.memory_bytes, narrowed.cpu_seconds, narrowed.file_bytes) == (100, 2, 7)


def test_capabilities_intersect_to_what_both_offer():
    left = Capabilities(features=("a", "b"), network_modes=("none", "inherit"))
    right = Capabilities(features=("b", "c"), network_modes=("none",))
    both = left.intersect(right)
    assert both.features == {"b"} and both.supports("network", "none") and not both.supports("network", "inherit")


@pytest.fixture
def sandbox(workspace):
    if not os.access("/usr/bin/bwrap", os.X_OK):
        pytest.skip("bubblewrap is not installed")
    with Bubblewrap(
        workspace=workspace,
        policy={"files": {"root": "read_write", "source": "read_only"}, "runtime_paths": {"out": "read_write"}},
        profiles={"reviewer": {"files": {"source": "read_only"}, "runtime_paths": []}},
    ) as sandbox:
        yield sandbox


def test_a_scope_narrows_paths_capabilities_and_network(sandbox):
    scope = sandbox.scope(files={"root": "read_only"}, runtime_paths=[], capabilities=["process_execute"])
    assert dict(scope.files) == {"root": "read_only"} and dict(scope.runtime_paths) == {}
    assert scope.supports("process_execute") and not scope.supports("process_spawn")
    assert scope.network.none and not scope.writable
    assert scope.allows("process_execute") and not scope.allows("memory_limit")
    assert scope.open() is scope and scope.close() is None
    assert scope.scope(files=[]).files == {}


def test_a_profile_names_a_preset_scope(sandbox):
    reviewer = sandbox.scope("reviewer")
    assert dict(reviewer.files) == {"source": "read_only"}
    with pytest.raises(PolicyError, match="no sandbox profile named 'admin'"):
        sandbox.scope("admin")


@pytest.mark.parametrize(
    ("narrowing", "match"),
    [
        ({"files": {"secrets": "read_only"}}, "cannot add files path 'secrets'"),
        ({"files": {"source": "read_write"}}, "cannot make files path 'source' writable"),
        ({"runtime_paths": {"root": "read_only"}}, "cannot add runtime_paths path 'root'"),
        ({"capabilities": ["process_execute", "process_spawn_denial"]}, "cannot add capabilities"),
        ({"network": "inherit"}, "cannot widen network access from 'none' to 'inherit'"),
        ({"network": {"allow": ["example.com"]}}, "cannot widen network access"),
    ],
)
def test_a_scope_cannot_widen_its_parent(sandbox, narrowing, match):
    with pytest.raises(PolicyError, match=match):
        sandbox.scope(**narrowing)


def test_a_nested_scope_cannot_regain_what_its_parent_scope_dropped(sandbox):
    read_only = sandbox.scope(files={"root": "read_only"})
    with pytest.raises(PolicyError, match="writable"):
        read_only.scope(files={"root": "read_write"})


def test_allows_checks_the_innermost_granted_path(workspace):
    sandbox = Unrestricted(workspace=workspace, policy={"files": {"root": "read_write", "source": "read_only"}})
    assert sandbox.allows("filesystem_write", "notes.md")
    assert sandbox.allows("filesystem_read", "workspace://source/a.txt")
    assert not sandbox.allows("filesystem_write", "workspace://source/a.txt")
    assert not sandbox.allows("filesystem_read", "/etc/passwd")
    assert not sandbox.allows("filesystem_read", "workspace://missing/x")


@requires_bwrap
def test_a_scope_enforces_its_narrowed_paths_on_the_child(sandbox):
    scope = sandbox.scope(files={"root": "read_only"}, runtime_paths=[])
    result = scope.execute_program(python(errno_probe("open('written.txt', 'w')")), timeout=30)
    assert result.stdout.strip() == "EROFS", result
    hidden = scope.execute_program(python(errno_probe("os.listdir('out')")), timeout=30)
    assert hidden.stdout.strip() == "ok", "out lies inside the root, which the scope still grants read-only"
    assert sandbox.execute_program(python(errno_probe("open('written.txt', 'w')")), timeout=30).stdout.strip() == "ok"


def test_bubblewrap_defaults_to_no_network(workspace):
    assert Bubblewrap(workspace=workspace).effective_policy.network == NetworkPolicy("none")


def test_bubblewrap_refuses_to_claim_it_can_deny_subprocesses(sandbox):
    with pytest.raises(CapabilityError, match="cannot deny subprocess creation"):
        sandbox.start_program(["true"], allow_subprocesses=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="the kernel applies process limits to every user but root")
def test_a_process_limit_for_a_root_sandbox_user_is_refused_not_ignored(sandbox):
    with pytest.raises(CapabilityError, match="cannot enforce processes"):
        sandbox.execute_program(["true"], timeout=5, processes=10)


def test_bubblewrap_is_linux_only(workspace):
    with pytest.raises(UnsupportedPlatformError, match="needs Linux"):
        Bubblewrap(workspace=workspace, platform="darwin")


def test_a_missing_bwrap_fails_at_open_and_is_never_replaced(workspace):
    sandbox = Bubblewrap(workspace=workspace, bubblewrap="/nonexistent/bwrap")
    with pytest.raises(DependencyError, match="not installed at /nonexistent/bwrap"):
        sandbox.open()
    with pytest.raises(SandboxConfigurationError, match="not open"):
        sandbox.start_program(["true"])
    report = Sandbox.probe("bubblewrap", executable="/nonexistent/bwrap")
    assert not report.available and "not installed" in report.reason


@pytest.mark.parametrize("platform", ["darwin", "win32", "freebsd14"])
def test_the_native_backend_fails_closed_where_it_has_no_isolation(workspace, platform):
    with pytest.raises(UnsupportedPlatformError):
        Native(workspace=workspace, platform=platform)
    report = Sandbox.probe("native", platform=platform)
    assert not report.available and report.capabilities is None


def test_the_native_backend_on_linux_is_bubblewrap(workspace):
    assert isinstance(Native(workspace=workspace, platform="linux"), Bubblewrap)
    assert Sandbox.resolve_provider("native") is Native


def test_an_unknown_backend_name_is_an_error_never_a_fallback():
    with pytest.raises(SandboxConfigurationError, match="no sandbox backend named 'docker'"):
        Sandbox.resolve_provider("docker")


def test_a_registered_backend_resolves_by_name():
    Sandbox.register_provider("test-unrestricted", Unrestricted)
    assert Sandbox.resolve_provider("test-unrestricted") is Unrestricted


def test_unrestricted_reports_its_real_authority_and_refuses_containment_requests(workspace):
    sandbox = Unrestricted(workspace=workspace)
    assert sandbox.effective_policy.root_filesystem == "read_write"
    assert sandbox.network.inherit
    assert sandbox.capabilities().isolation == "none"
    with pytest.raises(CapabilityError, match="cannot enforce network 'none'"):
        Unrestricted(workspace=workspace, policy={"network": "none"})


def test_a_sandbox_opens_only_over_an_open_workspace(tmp_path):
    with pytest.raises(SandboxConfigurationError, match="open the workspace before the sandbox"):
        Unrestricted(workspace=Workspace(root=tmp_path)).open()
    with pytest.raises(SandboxConfigurationError, match="needs a Workspace"):
        Unrestricted(workspace=str(tmp_path))


def test_a_policy_naming_an_undeclared_path_is_refused_at_open(workspace):
    with pytest.raises(PolicyError, match="grants 'secrets', which the workspace does not declare"):
        Unrestricted(workspace=workspace, policy={"files": {"secrets": "read_only"}}).open()


def test_a_sandbox_refuses_to_start_in_a_replaced_directory(workspace, tmp_path):
    sandbox = Unrestricted(workspace=workspace, policy={"files": {"root": "read_write", "source": "read_only"}}).open()
    os.rename(workspace.real_path("source"), tmp_path / "moved")
    os.mkdir(workspace.real_path("source"))
    with pytest.raises(SandboxConfigurationError, match="'source'.*was replaced"):
        sandbox.execute_program(["true"], timeout=5)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda s: s.execute_program("ls -la", timeout=5), ValueError, "non-empty list of arguments"),
        (lambda s: s.execute_program([], timeout=5), ValueError, "non-empty list of arguments"),
        (lambda s: s.execute_program(["true"], timeout=0), ValueError, "positive number of seconds"),
        (lambda s: s.execute_program(["true", 3], timeout=5), ValueError, "strings without NUL"),
        (lambda s: s.execute("", timeout=5), ValueError, "non-empty string"),
        (lambda s: s.execute_program(["true"], timeout=5, cwd="/etc"), ValueError, "physical path"),
        (lambda s: s.execute_program(["true"], timeout=5, cwd="../x"), ValueError, "leaves its workspace path"),
        (lambda s: s.execute_program(["true"], timeout=5, environment={"A": None}), PolicyError, "must be a string"),
        (lambda s: s.execute_program(["true"], timeout=5, inherit_environment=True), PolicyError, "does not allow"),
        (lambda s: s.execute_program(["true"], timeout=5, memory_bytes=0), PolicyError, "positive integer"),
        (lambda s: s.execute_program(["true"], timeout=5, max_output_bytes=0), ValueError, "positive number of bytes"),
    ],
)
def test_bad_calls_are_refused_with_a_clear_error(workspace, call, error, match):
    sandbox = Unrestricted(workspace=workspace, policy={"files": {"root": "read_write"}}).open()
    with pytest.raises(error, match=match):
        call(sandbox)


def test_a_sandbox_is_built_from_settings_with_native_as_the_default_provider(workspace):
    sandbox = Sandbox.from_settings(workspace, {"files": {"root": "read_write"}, "network": "none", "limits": {}})
    assert isinstance(sandbox, Bubblewrap) and sandbox.effective_policy.workspace_writable
    host = Sandbox.from_settings(workspace, {"provider": "unrestricted", "files": {"root": "read_only"}})
    assert isinstance(host, Unrestricted)
    with pytest.raises(PolicyError, match="does not take"):
        Sandbox.from_settings(workspace, {"provider": "unrestricted", "bubblewrap": "/usr/bin/bwrap"})
    with pytest.raises(SandboxConfigurationError, match="no sandbox backend named 'chroot'"):
        Sandbox.from_settings(workspace, {"provider": "chroot"})


def test_a_workspace_is_built_from_settings_or_a_factory(tmp_path):
    workspace = Workspace.from_settings({"provider": "directory", "root": tmp_path / "run", "paths": {"a": "a"}})
    assert workspace.paths["a"] == str(tmp_path / "run" / "a")
    made = Workspace.from_settings(lambda run=None: Workspace(root=tmp_path / run), run="r1")
    assert made.root == str(tmp_path / "r1")
    with pytest.raises(TypeError, match="invalid workspace settings"):
        Workspace.from_settings({"root": tmp_path, "colour": "blue"})
    with pytest.raises(TypeError, match="must return a Workspace"):
        Workspace.from_settings(lambda: "not a workspace")


def test_require_raises_when_the_backend_cannot_run_here():
    with pytest.raises(DependencyError, match="the native sandbox backend cannot run on this host: no native"):
        Sandbox.require("native", platform="plan9")
    with pytest.raises(DependencyError, match="not installed at /nonexistent/bwrap"):
        Sandbox.require("bubblewrap", executable="/nonexistent/bwrap")
    assert Sandbox.require("unrestricted").available


@requires_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="switching the probe's user needs root")
def test_a_probe_can_run_as_the_sandbox_user():
    report = Sandbox.probe("bubblewrap", host_user=65534)
    assert report.available, report.reason


def test_unrestricted_refuses_a_scope_asking_for_less_network_than_the_host(workspace):
    with Unrestricted(workspace=workspace) as sandbox:
        with pytest.raises(CapabilityError, match="cannot enforce network 'none' for a scope"):
            sandbox.scope(network="none").execute_program(["true"], timeout=5)


@pytest.mark.skipif(os.geteuid() != 0, reason="a sandbox user other than the worker's needs a root worker")
def test_a_sandbox_user_without_access_to_a_granted_path_is_refused_at_open(tmp_path):
    os.chmod(tmp_path, 0o700)
    workspace = Workspace(root=tmp_path / "root").open()
    sandbox = Bubblewrap(workspace=workspace, policy={"files": {"root": "read_write"}}, host_user=65534)
    with pytest.raises(SandboxConfigurationError, match="the sandbox user 65534 cannot write workspace path 'root'"):
        sandbox.open()
