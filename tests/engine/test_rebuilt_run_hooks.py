"""A run continued by another process gets that process's run-scoped resources.

``Hook.prepare_run`` registers resources on a Run (a tenant's connection, a
client). A worker executing one step, ``resume`` after a crash, and ``retry``
rebuild the Run from the store; the resources of the process that built it
first do not exist there, so the hooks run again, and what they registered
closes when that process is done with the run.
"""

from __future__ import annotations

from collections import deque

import pytest

from lg_core import Agent, Configuration, Hook, Tool, with_configuration
from lg_core.providers import scripted
from tests.engine.numbered_tool import numbered_calls


class TenantConnection:
    """A stand-in for a per-run client: it knows its process and whether it was closed."""

    opened: list[TenantConnection] = []

    def __init__(self, runtime_name: str, actor_id: str | None) -> None:
        self.runtime_name = runtime_name
        self.actor_id = actor_id
        self.closed = False
        TenantConnection.opened.append(self)

    def close(self) -> None:
        self.closed = True


class TenantHook(Hook):
    process = "unnamed"  # which of the test's runtimes (processes) this hook belongs to

    def prepare_run(self, run):
        run.tenant = run.register(TenantConnection(self.process, run.invocation.actor_id))
        return run


def _hook_of(process: str) -> type[Hook]:
    return type(f"TenantHook_{process}", (TenantHook,), {"process": process})


class TenantTool(Tool):
    tool_name = "numbered"
    description = "Report which process's connection served the call."
    input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    def call(self, input):
        connection = self.run.tenant
        assert not connection.closed
        return f"{input['n']} via {connection.runtime_name} for {connection.actor_id}"


scripted.register("rebuilt-run-hooks", numbered_calls(1, 2))


class TenantAgent(Agent):
    model = "scripted:rebuilt-run-hooks"
    tools = [TenantTool]


@pytest.fixture(autouse=True)
def _no_connections():
    TenantConnection.opened = []


def _runtimes_on(config: Configuration, **settings) -> list[Configuration]:
    return [Configuration(run_store=config.run_store, **settings)]


def _runtimes(tmp_path, *names: str, **settings):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    return [Configuration(run_store=url, hooks=[_hook_of(name)], **settings) for name in names]


@pytest.fixture
def configs(request, tmp_path):
    made = []

    def build(*names: str, **settings):
        made.extend(_runtimes(tmp_path, *names, **settings))
        return made[-len(names) :]

    yield build
    for config in made:
        config.close()


def _start(client_config) -> tuple[str, object]:
    client = client_config.runtime()
    with with_configuration(client_config):
        (ref,) = client.begin(TenantAgent.build_run("go", actor_id="user-7"), distributed=True)
    return ref.run_id, ref


def _tool_results(runtime, run_id: str) -> list[str]:
    steps = [step for step in runtime.store.load_steps(run_id) if step.kind == "tool"]
    return [step.result["tool_result"]["content"][0]["text"] for step in steps]


def test_workers_executing_steps_use_their_own_prepared_resources(configs):
    client, first, second = configs("client", "worker-1", "worker-2")
    run_id, ref = _start(client)
    queue, turn = deque([ref]), 0
    while queue:
        ref = queue.popleft()
        worker = (first, second)[turn % 2].runtime()
        turn += 1
        outcome, successors = worker.engine.execute_claimed(ref.run_id, ref.key)
        assert outcome == "executed"
        queue.extend(successors)

    assert client.runtime().store.load_run(run_id).status == "completed"
    assert _tool_results(client.runtime(), run_id) == ["1 via worker-2 for user-7", "2 via worker-2 for user-7"]
    # worker-1 ran the model turns (including the last one, which ended the run): it closed its connection then.
    by_process = {c.runtime_name: c for c in TenantConnection.opened if c.runtime_name != "client"}
    assert by_process["worker-1"].closed


def test_a_worker_closes_a_rebuilt_runs_resources_when_its_cache_drops_the_run(configs):
    client, worker = configs("client", "worker", run_cache_size=1)
    first_run, first_ref = _start(client)
    second_run, second_ref = _start(client)
    engine = worker.runtime().engine

    engine.execute_claimed(first_run, first_ref.key)
    engine.execute_claimed(second_run, second_ref.key)  # the cache holds one run: the first is dropped

    first, second = _opened_by("worker")
    assert first.closed and not second.closed
    worker.close()  # shutting down closes what the cache still holds
    assert second.closed


def _opened_by(process: str) -> list[TenantConnection]:
    return [c for c in TenantConnection.opened if c.runtime_name == process]


def test_a_run_with_a_step_executing_here_is_not_dropped_from_the_cache(configs):
    """Closing a run's resources under its running step would break the step: a busy run stays."""
    client, worker = configs("client", "worker", run_cache_size=1)
    (busy_run, busy_ref), (other_run, other_ref) = _start(client), _start(client)
    engine = worker.runtime().engine

    engine.run_handle(busy_run)
    with engine.heartbeat.holding(busy_run, busy_ref.key):  # as a worker holds the step it executes
        engine.execute_claimed(other_run, other_ref.key)
        busy, other = _opened_by("worker")
        assert not busy.closed and not other.closed  # the cache is over its size while both are busy
    third_run, third_ref = _start(client)
    engine.execute_claimed(third_run, third_ref.key)  # the next rebuild drops what is idle by then
    assert busy.closed and other.closed and not _opened_by("worker")[2].closed


def test_a_closer_that_refers_to_its_run_still_runs_when_the_cache_drops_the_run(configs):
    class RunAwareHook(Hook):
        def prepare_run(self, run):
            run.register(closer=lambda: closed.append(run.id))  # the closer keeps the run alive
            return run

    closed: list[str] = []
    (client,) = configs("client")
    (worker,) = _runtimes_on(client, hooks=[RunAwareHook], run_cache_size=1)
    try:
        (first_run, first_ref), (second_run, second_ref) = _start(client), _start(client)
        worker.runtime().engine.execute_claimed(first_run, first_ref.key)
        worker.runtime().engine.execute_claimed(second_run, second_ref.key)
        assert closed == [first_run]
    finally:
        worker.close()
    assert closed == [first_run, second_run]


def test_resume_prepares_the_run_in_the_resuming_process_and_closes_it_at_the_end(configs):
    client, resumer = configs("client", "resumer")
    run_id, _ = _start(client)  # stored with its first step scheduled; nobody executes it

    run = resumer.runtime().resume(run_id, force=True)

    assert run.outcome == "completed"
    assert _tool_results(resumer.runtime(), run_id) == ["1 via resumer for user-7", "2 via resumer for user-7"]
    (connection,) = [c for c in TenantConnection.opened if c.runtime_name == "resumer"]
    assert connection.closed


def test_a_prepare_run_that_raises_fails_the_rebuild_not_silently(configs):
    class BrokenHook(Hook):
        def prepare_run(self, run):
            raise RuntimeError("tenant database unreachable")

    (client,) = configs("client")
    (resumer,) = _runtimes_on(client, hooks=[BrokenHook])
    run_id, _ = _start(client)

    with pytest.raises(RuntimeError, match="tenant database unreachable"):
        resumer.runtime().resume(run_id, force=True)
    assert client.runtime().store.load_run(run_id).status == "running"  # nothing lost: it can be resumed later


class _RaisingHook(Hook):
    def prepare_run(self, run):
        raise RuntimeError("tenant database unreachable")


def test_a_worker_whose_prepare_run_raises_can_still_end_the_run(configs):
    # A cancel, a passed deadline or a step out of attempts ends the run from its record:
    # a hook that fails on every rebuild must not leave it running forever.
    (client,) = configs("client")
    (worker,) = _runtimes_on(client, hooks=[_RaisingHook])
    run_id, _ = _start(client)
    try:
        ended = worker.runtime().engine.end_run(run_id, "cancelled", None)
    finally:
        worker.close()

    assert ended
    assert client.runtime().store.load_run(run_id).status == "cancelled"


def test_a_raising_prepare_run_closes_what_earlier_hooks_registered_on_a_rebuilt_run(configs):
    (client,) = configs("client")
    (resumer,) = _runtimes_on(client, hooks=[_hook_of("resumer"), _RaisingHook])
    run_id, _ = _start(client)
    try:
        with pytest.raises(RuntimeError, match="tenant database unreachable"):
            resumer.runtime().resume(run_id, force=True)
    finally:
        resumer.close()

    (connection,) = [c for c in TenantConnection.opened if c.runtime_name == "resumer"]
    assert connection.closed


def test_a_run_dropped_from_a_workers_cache_is_closed_outside_the_engine_lock(configs):
    # Closing a resource may take a while (a network connection): meanwhile every other step
    # of the worker needs the engine's lock to find its run, and a closer that reached the
    # engine itself would deadlock on it.
    under_lock: list[bool] = []

    class LockProbeHook(Hook):
        def prepare_run(self, run):
            engine = run.runtime.engine
            run.register(closer=lambda: under_lock.append(engine.registry.lock.locked()))
            return run

    (client,) = configs("client")
    (worker,) = _runtimes_on(client, hooks=[LockProbeHook], run_cache_size=1)
    first_run, first_ref = _start(client)
    second_run, second_ref = _start(client)
    engine = worker.runtime().engine
    try:
        engine.execute_claimed(first_run, first_ref.key)
        engine.execute_claimed(second_run, second_ref.key)  # the cache holds one run: the first is dropped
        assert under_lock == [False]
    finally:
        worker.close()
