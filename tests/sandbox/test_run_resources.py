"""A run's workspace and sandbox: built from the settings for each step, opened by tool calls in
order (workspace, then sandbox) and closed in reverse on every outcome; settings a durable run
cannot honour are refused."""

from __future__ import annotations

import pytest

from lg_core import Agent, Tool
from lg_core.config import Configuration, with_configuration
from lg_core.errors import CancelledError, CleanupError, ConfigurationError
from lg_core.sandbox.run_resources import RunResources, build_resources, opened
from lg_core.sandboxes import Unrestricted
from lg_core.workspace import Workspace


class _Log(list):
    pass


def recording_settings(log, tmp_path):
    class RecordingWorkspace(Workspace):
        def open(self, run=None):
            log.append("workspace.open")
            return super().open(run)

        def close(self, run=None):
            log.append("workspace.close")
            super().close(run)

    class RecordingSandbox(Unrestricted):
        def open(self, run=None):
            log.append("sandbox.open")
            return super().open(run)

        def close(self):
            log.append("sandbox.close")
            super().close()

    def workspace(run_id, invocation):
        return RecordingWorkspace(root=tmp_path / "runs" / run_id)

    def sandbox(workspace):
        return RecordingSandbox(workspace=workspace, policy={"files": {"root": "read_write"}})

    return {"workspace": workspace, "sandbox": sandbox}


class Probe(Tool):
    tool_name = "probe"
    description = "Report on the bound workspace and sandbox, or fail as asked."
    input_schema = {"type": "object", "properties": {"fail": {"type": "string"}}}
    seen: list = []

    def call(self, input):
        Probe.seen.append((self.workspace.opened, self.sandbox is self.agent.sandbox, self.sandbox.workspace))
        if input.get("fail") == "error":
            raise RuntimeError("tool broke")
        if input.get("fail") == "cancel":
            raise CancelledError("stop")
        return self.sandbox.write("probe.txt", "here")


@pytest.fixture
def recorded(tmp_path):
    log = _Log()
    configuration = Configuration(**recording_settings(log, tmp_path))
    with with_configuration(configuration):
        yield log
    configuration.close()
    Probe.seen = []


@pytest.mark.parametrize(("fail", "outcome"), [(None, "completed"), ("error", "completed"), ("cancel", "cancelled")])
def test_a_tool_call_opens_workspace_then_sandbox_and_closes_them_in_reverse_on_every_outcome(
    recorded, script, fail, outcome
):
    arguments = {} if fail is None else {"fail": fail}
    target = script([{"tool_calls": [{"name": "probe", "id": "p", "arguments": arguments}]}, {"text": "done"}])
    agent = type("ProbeAgent", (Agent,), {"model": target, "tools": [Probe]})

    run = agent.ask("Probe")

    assert run.outcome == outcome
    # Model turns build the pair to list tools but never open it; the tool call opens and closes it.
    assert list(recorded) == ["workspace.open", "sandbox.open", "sandbox.close", "workspace.close"]
    opened_workspace, same_sandbox, workspace = Probe.seen[0]
    assert opened_workspace and same_sandbox and workspace.root.endswith(run.id)


def test_each_step_opens_its_own_pair_and_keeps_nothing_from_the_one_before(recorded, script, tmp_path):
    target = script(
        [
            {"tool_calls": [{"name": "probe", "id": "a", "arguments": {}}]},
            {"tool_calls": [{"name": "probe", "id": "b", "arguments": {}}]},
            {"text": "done"},
        ]
    )
    run = type("ProbeAgent", (Agent,), {"model": target, "tools": [Probe]}).ask("Probe twice")

    assert run.outcome == "completed"
    assert list(recorded) == ["workspace.open", "sandbox.open", "sandbox.close", "workspace.close"] * 2
    first, second = Probe.seen[0][2], Probe.seen[1][2]
    assert first is not second and first.root == second.root == str(tmp_path / "runs" / run.id)


def test_the_workspace_closes_even_when_the_sandbox_fails_to(tmp_path):
    log = []

    class FailingSandbox(Unrestricted):
        def close(self):
            raise OSError("gateway would not stop")

    class LoggedWorkspace(Workspace):
        def close(self, run=None):
            log.append("workspace.close")

    workspace = LoggedWorkspace(root=tmp_path / "ws")
    resources = RunResources(workspace, FailingSandbox(workspace=workspace, policy={"files": {"root": "read_only"}}))

    with pytest.raises(CleanupError, match="failed to close: OSError"), opened(resources):
        pass
    assert log == ["workspace.close"]


# -- settings --------------------------------------------------------------------------------


def test_a_mapping_workspace_gets_one_root_per_run_under_its_run_id_field(tmp_path):
    configuration = Configuration(
        workspace={"root": str(tmp_path / "{run_id}"), "paths": {"notes": "notes"}}, sandbox="unrestricted"
    )
    resources = build_resources(configuration.workspace, configuration.sandbox, "run-1")

    assert resources.workspace.root == str(tmp_path / "run-1")
    assert resources.workspace.paths["notes"] == str(tmp_path / "run-1" / "notes")
    assert type(resources.sandbox).__name__ == "Unrestricted"
    configuration.close()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"workspace": {"root": "relative/runs"}}, "absolute 'root' every worker reaches"),
        ({"workspace": {"root": "/srv/x", "teardown": lambda **_: None}}, "teardown is not supported"),
        ({"workspace": {"root": "/srv/x", "paths": {"Bad": "b"}}}, "lower-case letters"),
        ({"workspace": {"root": "/srv/x", "provider": "cloud"}}, "no workspace provider named 'cloud'"),
        ({"workspace": 42}, "workspace must be a mapping, a factory"),
        ({"sandbox": "seccomp"}, "no sandbox backend named 'seccomp'"),
        ({"sandbox": {"provider": "firejail"}}, "no sandbox backend named 'firejail'"),
        ({"sandbox": {"provider": "bubblewrap", "files": {"root": "writable"}}}, "writable"),
        ({"sandbox": {"provider": "bubblewrap", "network": "sometimes"}}, "sometimes"),
        ({"sandbox": {"provider": "bubblewrap", "limits": {"memory": 5}}}, "memory"),
    ],
)
def test_settings_a_durable_run_cannot_honour_are_refused_when_configured(settings, message):
    with pytest.raises(ConfigurationError, match=message):
        Configuration(**settings)


def test_a_sandbox_without_a_workspace_is_refused_when_a_run_builds_them():
    with pytest.raises(ConfigurationError, match="the sandbox setting needs a workspace setting"):
        build_resources(None, {"provider": "unrestricted"}, "run-1")


def test_a_workspace_factory_returning_a_teardown_is_refused(tmp_path):
    def factory(run_id, invocation):
        return Workspace(root=tmp_path / run_id, teardown=lambda **_: None)

    with pytest.raises(ConfigurationError, match="teardown callback, which a durable run cannot honour"):
        build_resources(factory, None, "run-1")


def test_a_tool_sees_no_workspace_or_sandbox_when_none_is_configured(config, script):
    seen = []

    class Look(Tool):
        tool_name = "look"
        description = "Look at the binding."

        def call(self, input):
            seen.append((self.workspace, self.sandbox, self.agent.sandbox))
            return "ok"

    target = script([{"tool_calls": [{"name": "look", "id": "l", "arguments": {}}]}, {"text": "done"}])
    type("LookAgent", (Agent,), {"model": target, "tools": [Look]}).ask("Look")

    assert seen == [(None, None, None)]


def test_the_settings_read_mappings_written_as_json_from_the_environment(monkeypatch):
    monkeypatch.setenv("LG_WORKSPACE", '{"root": "/srv/lg/runs/{run_id}", "paths": {"notes": "notes"}}')
    monkeypatch.setenv("LG_SANDBOX", '{"provider": "bubblewrap", "files": {"root": "read_write"}}')
    configuration = Configuration()

    assert configuration.workspace == {"root": "/srv/lg/runs/{run_id}", "paths": {"notes": "notes"}}
    assert configuration.sandbox == {"provider": "bubblewrap", "files": {"root": "read_write"}}
    configuration.close()

    monkeypatch.setenv("LG_SANDBOX", '{"provider": ')
    with pytest.raises(ConfigurationError, match="sandbox is not valid JSON"):
        Configuration()


def test_an_agent_whose_init_takes_the_original_four_arguments_still_gets_the_runs_pair(recorded, script):
    class CustomInitAgent(Agent):
        def __init__(self, run=None, runtime=None, model=None, context=None):
            super().__init__(run, runtime, model, context)
            self.greeting = "hello"

    target = script([{"tool_calls": [{"name": "probe", "id": "p", "arguments": {}}]}, {"text": "done"}])
    agent = type("ProbeAgent", (CustomInitAgent,), {"model": target, "tools": [Probe]})

    run = agent.ask("Probe")

    assert run.outcome == "completed"
    assert Probe.seen[0][0] and Probe.seen[0][1]  # the tool's sandbox is the agent's, and its workspace is open
