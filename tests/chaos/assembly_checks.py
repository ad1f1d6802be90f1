"""What a chaos test proves about its Graph, Workflow and Swarm runs: each completed, and each child ran once.

The assemblies of tests/distributed (graph_dist_app, workflow_dist_app, swarm_dist_app) give
every child Agent one ``effect`` tool call with its number, logged with the call's idempotency
key ``<child run id>/<step key>``. A child run's record names its parent, so each logged call
is traced to its assembly run. Each child ran once when every number the assembly expects
was logged under exactly one key (a second key would be a second child run for the same node,
invoke or member turn), and a key logged more than once belongs to a call interrupted before
its commit (logged calls <= the step's claims), as for any tool call.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import graph_dist_app
import swarm_dist_app
import workflow_dist_app

# The assemblies a chaos test may start, with the effect numbers each run logs once (one per child).
EFFECTS = {
    graph_dist_app.TransferGraph: frozenset(graph_dist_app.NODES.values()),
    workflow_dist_app.TransferWorkflow: frozenset(graph_dist_app.NODES.values()),
    swarm_dist_app.ChargeSwarm: frozenset(swarm_dist_app.MEMBERS.values()),
}


def check_assembly_runs(
    store: Any, calls: list[tuple[str, int, str]], expected: dict[str, frozenset[int]]
) -> list[str]:
    """Problems found with the assembly runs in ``expected`` (run id -> effect numbers it must log once)."""
    problems: list[str] = []
    parents: dict[str, str | None] = {}
    keys: dict[str, dict[int, set[str]]] = {run_id: {} for run_id in expected}
    logged = Counter(key for tool, _n, key in calls if tool == "effect")
    for tool, n, key in calls:
        child = key.split("/", 1)[0]
        if tool != "effect":
            continue
        if child not in parents:
            record = store.load_run(child)
            parents[child] = record.parent_run_id if record is not None else None
        if parents[child] in keys:
            keys[str(parents[child])].setdefault(n, set()).add(key)
    for run_id, numbers in expected.items():
        record = store.load_run(run_id)
        if record.status != "completed":
            problems.append(f"assembly run {run_id} is {record.status}: {record.error}")
            continue
        found = keys[run_id]
        if set(found) != numbers or any(len(each) != 1 for each in found.values()):
            problems.append(
                f"assembly run {run_id} ran its children's effects under {found}, expected {sorted(numbers)} once"
            )
    for key, n in logged.items():
        child, step_key = key.split("/", 1)
        if parents.get(child) not in keys:
            continue
        step = store.load_step(child, step_key)
        if step is None or n > step.attempts:
            problems.append(
                f"{key} ran {n} times but was claimed {step and step.attempts} times (a committed step ran again)"
            )
    return problems


__all__ = ["EFFECTS", "check_assembly_runs"]
