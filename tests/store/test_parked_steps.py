"""A step waiting on a child run: parked by its commit, woken by the child's ending in the same transaction.

On every store: the park applies only while the child runs (else ``child_run_ended``,
and the step stays held); a parked step is no longer open (no sweep, relay or claim
sees it); the commit ending the child puts it back in the outbox and returns it to
publish; and a parent's ending asks its running children to stop.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from lg_core.store import RunFinish, RunStore, StepCommit
from tests.store.outbox_steps import create_distributed_run, step_column

HOLDER = "host:1:1.0"
NODE = "root/node-1/triage"


@pytest.fixture(params=["memory", "file", "postgres"])
def store(request, tmp_path):
    url = {"memory": "sqlite://", "file": f"sqlite:///{tmp_path / 'runs.db'}"}.get(request.param)
    store = RunStore(url or request.getfixturevalue("pg_url"))
    yield store
    store.close()


def _child(store: RunStore, run_id: str, parent: str = "p", key: str = NODE) -> None:
    create_distributed_run(store, run_id)
    with store.db.engine.begin() as conn:
        conn.execute(
            text("UPDATE lg_runs SET parent_run_id = :p, parent_step_key = :k WHERE id = :r"),
            {"p": parent, "k": key, "r": run_id},
        )


def _park(store: RunStore, child: str, key: str = NODE):
    return store.commit(
        StepCommit(
            run_id="p",
            frame_id="p/root",
            expected_version=store.load_frame("p/root").version,
            checkpoint={},
            step_key=key,
            step_status="waiting",
            holder=HOLDER,
            waits_on=child,
        )
    )


def _end(store: RunStore, run_id: str, status: str = "completed", **flags):
    return store.commit(
        StepCommit(
            run_id=run_id,
            frame_id=f"{run_id}/root",
            expected_version=store.load_frame(f"{run_id}/root").version,
            checkpoint={},
            finish=RunFinish(status, "done", None, None, None),
            **flags,
        )
    )


def test_a_parked_step_is_woken_by_its_childs_ending(store):
    create_distributed_run(store, "p", steps=(("graph_node", NODE),))
    assert store.claim_step("p", NODE, HOLDER, 30.0) == 1
    _child(store, "c")

    parked = _park(store, "c")

    assert parked.applied, parked.reason
    assert step_column(store, "status", "p", NODE) == "waiting"
    assert step_column(store, "holder", "p", NODE) is None
    assert store.load_steps("p", open_only=True) == []

    ended = _end(store, "c", wakes_parent=True)

    assert ended.applied, ended.reason
    assert ended.woken == (("p", NODE, "graph_node", "p/root"),)
    assert step_column(store, "status", "p", NODE) == "scheduled"
    assert step_column(store, "dispatch_after", "p", NODE) is not None  # back in the outbox
    # Parking was a committed outcome, not a failed attempt: the woken step's attempts start again, so a
    # workflow's perform step, woken once per child it waits for, never nears max_step_attempts.
    assert store.claim_step("p", NODE, HOLDER, 30.0) == 1


def test_a_step_does_not_park_on_a_child_that_has_ended(store):
    create_distributed_run(store, "p", steps=(("graph_node", NODE),))
    store.claim_step("p", NODE, HOLDER, 30.0)
    _child(store, "c")
    _end(store, "c", wakes_parent=True)  # the child ends before the step parks: nothing to wake yet

    parked = _park(store, "c")

    assert not parked.applied
    assert parked.reason == "child_run_ended"
    assert step_column(store, "status", "p", NODE) == "running"
    assert step_column(store, "holder", "p", NODE) == HOLDER


def test_an_ending_that_wakes_no_parked_step_wakes_nothing(store):
    create_distributed_run(store, "p", steps=(("graph_node", NODE),))
    store.claim_step("p", NODE, HOLDER, 30.0)
    _child(store, "c")

    ended = _end(store, "c", wakes_parent=True)  # the step is running, not parked

    assert ended.applied and ended.woken == ()
    assert step_column(store, "status", "p", NODE) == "running"


def test_a_parents_ending_asks_its_running_children_to_stop_and_closes_its_parked_step(store):
    create_distributed_run(store, "p", steps=(("graph_node", NODE),))
    store.claim_step("p", NODE, HOLDER, 30.0)
    _child(store, "c")
    _park(store, "c")

    ended = _end(store, "p", status="cancelled", cancels_children=True)

    assert ended.applied, ended.reason
    assert store.load_run("c").cancel_requested
    assert step_column(store, "status", "p", NODE) == "cancelled"
