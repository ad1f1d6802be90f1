"""A claimed step keeps its lease from the claim on, not only once its execution starts.

Between the claim and the step's execution a worker rebuilds the run
(``Runtime.restored_run``: the agent's import and every ``Hook.prepare_run``,
which may open a database pool, start an MCP server, fetch credentials). If
that takes longer than the lease with no heartbeat, the sweeper sees an
expired lease and re-dispatches a step whose holder is alive and about to
execute it: the step runs twice (a second model call, or an ``at_most_once``
tool reported "outcome unknown" while its first attempt runs it).
"""

from __future__ import annotations

import time

from lg_core import Agent, Configuration, Hook, with_configuration
from lg_core.providers import scripted
from lg_scheduler.recovery import sweep_leases
from tests.engine.numbered_tool import NumberedTool, RecordingPublisher, numbered_calls

scripted.register("claim-to-commit-lease", numbered_calls(1))
# Long enough that the sweep right after a renewal cannot find it expired unless this
# thread stalls for 1.5 s (sleeping four leases of 0.3 s and then sweeping found it
# expired whenever the heartbeat had just stalled for 0.2 s).
LEASE = 1.5


class EchoAgent(Agent):
    model = "scripted:claim-to-commit-lease"
    tools = [NumberedTool]


class SlowPrepare(Hook):
    """A run rebuilt in a worker takes more than a lease to prepare; meanwhile a scheduler sweeps."""

    sweeps: list[int] = []
    store = None

    def prepare_run(self, run):
        store = SlowPrepare.store
        if store is not None:
            ref = next(step for step in store.load_steps(run.id) if step.status == "running")
            seen = ref.lease_until
            # Until the lease is renewed past the one seen now (by then a lease has passed), or
            # far longer than that: an unrenewed lease has then long expired, and the sweep says so.
            deadline = time.monotonic() + 30
            while store.load_step(run.id, ref.key).lease_until <= seen + LEASE and time.monotonic() < deadline:
                time.sleep(0.02)
            SlowPrepare.sweeps.append(sweep_leases(store, RecordingPublisher(), hold_off=LEASE))
        return run


def test_a_step_keeps_its_lease_while_its_run_is_rebuilt(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    client_config = Configuration(run_store=url)
    worker_config = Configuration(run_store=url, lease_seconds=LEASE, hooks=[SlowPrepare])
    client, worker = client_config.runtime(), worker_config.runtime()
    try:
        with with_configuration(client_config):
            (ref,) = client.begin(EchoAgent.build_run("go"), distributed=True)
        SlowPrepare.store, SlowPrepare.sweeps = client.store, []
        with with_configuration(worker_config):
            outcome, _successors = worker.engine.execute_claimed(ref.run_id, ref.key)
        assert outcome == "executed"
        assert SlowPrepare.sweeps == [0], "the sweeper re-dispatched a step whose live holder was preparing its run"
    finally:
        SlowPrepare.store = None
        client_config.close()
        worker_config.close()
