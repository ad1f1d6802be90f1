"""The attempt limit of distributed steps (lg_core.engine._step_failures), without Celery.

A client and a worker (one runtime each) share a SQLite file, as in
test_execute_claimed. A worker that cannot import the run's agent is the
realistic failing attempt: the run was started where the agent imports, and
its stored entrypoint is then pointed at a module that does not exist.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from lg_core import Agent, Configuration, retry, with_configuration
from lg_core.engine._step_failures import (
    MAX_RETRY_DELAY_SECONDS,
    attempts_exhausted,
    failure_record,
    retry_delay,
)
from lg_core.errors import ConfigurationError, RunStateError
from lg_core.lease_holders import hostname
from lg_core.providers import scripted
from lg_core.run import import_entrypoint
from tests.engine.numbered_tool import NumberedTool, numbered_calls

scripted.register("step-attempts", numbered_calls(1))
MISSING = "tests.engine.no_such_module_for_attempts:GoneAgent"


class AttemptsAgent(Agent):
    model = "scripted:step-attempts"
    tools = [NumberedTool]


@pytest.fixture
def stack(tmp_path):
    """(client, worker) runtimes on one SQLite file; the worker allows 3 attempts per step."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    client_config = Configuration(run_store=url)
    worker_config = Configuration(run_store=url, max_step_attempts=3)
    yield client_config.runtime(), worker_config.runtime()
    client_config.close()
    worker_config.close()


def _start(client):
    with with_configuration(client.configuration):
        (ref,) = client.begin(AttemptsAgent.build_run("go"), distributed=True)
    return ref


def _set(runtime, sql: str, **params) -> None:
    with runtime.store.db.engine.begin() as connection:
        connection.execute(text(sql), params)


def _step_row(runtime, run_id: str, key: str):
    with runtime.store.db.engine.connect() as connection:
        return connection.execute(
            text("SELECT status, holder, attempts, dispatch_after FROM lg_steps WHERE run_id = :r AND key = :k"),
            {"r": run_id, "k": key},
        ).one()


def test_the_retry_delay_doubles_up_to_a_minute():
    assert [retry_delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert retry_delay(10_000) == MAX_RETRY_DELAY_SECONDS
    assert retry_delay(0) == 1  # never negative or fractional, whatever the count


def test_a_failure_record_keeps_the_error_bounded():
    record = failure_record(RuntimeError("x" * 10_000), attempt=2)
    assert record["name"] == "RuntimeError" and record["attempt"] == 2
    assert len(record["message"]) == 2000 and record["message"].endswith("...")


def test_the_exhausted_error_says_why_and_what_to_do():
    raised = attempts_exhausted("run-1", "root/turn-1/model", 3, {"name": "ImportError", "message": "no module x"})
    assert isinstance(raised, RunStateError)
    assert "did not complete in 3 attempts" in str(raised) and "ImportError: no module x" in str(raised)
    assert "lg runs retry run-1" in str(raised)
    died = attempts_exhausted("run-1", "root/turn-1/model", 3, None)
    assert "worker processes died" in str(died)


@pytest.mark.parametrize("bad", [0, -1, 1001, "many", 2.5])
def test_max_step_attempts_is_validated(bad):
    with pytest.raises(ConfigurationError, match="max_step_attempts"):
        Configuration(max_step_attempts=bad)


def test_an_attempt_that_raises_gives_its_step_back_with_its_error(stack):
    client, worker = stack
    ref = _start(client)
    _set(client, "UPDATE lg_runs SET entrypoint = :e WHERE id = :r", e=MISSING, r=ref.run_id)

    before = time.time()
    with pytest.raises(RunStateError, match="cannot import the run's entrypoint.*lg worker --import"):
        worker.engine.execute_claimed(ref.run_id, ref.key)

    status, holder, attempts, dispatch_after = _step_row(client, ref.run_id, ref.key)
    assert (status, holder, attempts) == ("scheduled", None, 1)
    assert before + 1 <= dispatch_after <= time.time() + 1  # the relay sends it again after 1 s
    step = client.store.load_step(ref.run_id, ref.key)
    assert step.error["name"] == "RunStateError" and step.error["attempt"] == 1
    assert "lg worker --import" in step.error["message"]
    assert client.store.load_run(ref.run_id).status == "running"

    before = time.time()
    with pytest.raises(RunStateError):
        worker.engine.execute_claimed(ref.run_id, ref.key)
    _status, _holder, attempts, dispatch_after = _step_row(client, ref.run_id, ref.key)
    assert attempts == 2 and before + 2 <= dispatch_after <= time.time() + 2  # 2 s this time


def test_a_class_missing_from_a_module_the_worker_imported_says_to_restart_the_worker():
    """A worker imports the application when it starts: an agent added to the module since was
    reported only as "has no attribute", and restarting the workers was left to be guessed."""
    with pytest.raises(RunStateError, match=r"has no attribute 'AddedLaterAgent'.*restart it") as caught:
        import_entrypoint("tests.engine.numbered_tool:AddedLaterAgent")
    assert "lg stack down" in str(caught.value)
    with pytest.raises(RunStateError) as missing_module:
        import_entrypoint(MISSING)
    assert "restart" not in str(missing_module.value)  # nothing imported: the module name is the fault


def test_a_step_out_of_attempts_fails_its_run_and_a_retry_starts_the_count_again(stack):
    client, worker = stack
    ref = _start(client)
    _set(client, "UPDATE lg_runs SET entrypoint = :e WHERE id = :r", e=MISSING, r=ref.run_id)
    for _ in range(3):
        with pytest.raises(RunStateError):
            worker.engine.execute_claimed(ref.run_id, ref.key)

    # The fourth claim ends the run, though this worker cannot import its class either.
    assert worker.engine.execute_claimed(ref.run_id, ref.key) == ("abandoned", [])

    record = client.store.load_run(ref.run_id)
    assert record.status == "failed"
    assert record.error["name"] == "RunStateError"
    message = str(record.error)
    assert "did not complete in 3 attempts" in message and "cannot import the run's entrypoint" in message
    events = client.store.load_events(ref.run_id)
    assert events[-1].type == "run_error"
    assert worker.engine.execute_claimed(ref.run_id, ref.key)[0] == "done"  # a late message finds it over

    _set(client, "UPDATE lg_runs SET entrypoint = :e WHERE id = :r", e=f"{__name__}:AttemptsAgent", r=ref.run_id)
    with with_configuration(client.configuration):
        run = retry(ref.run_id)
    assert run.completed and run.response == "done"
    assert _step_row(client, ref.run_id, ref.key)[0] == "succeeded"


def test_workers_that_died_on_every_attempt_count_too(stack):
    """A killed worker records no error; its step is taken over from the dead holder, and that claim counts."""
    client, worker = stack
    ref = _start(client)
    dead = f"{hostname()}:{2**22 + 17}:1"
    _set(
        client,
        "UPDATE lg_steps SET status = 'running', holder = :h, attempts = 3, lease_until = :l "
        "WHERE run_id = :r AND key = :k",
        h=dead,
        l=time.time() + 600,
        r=ref.run_id,
        k=ref.key,
    )

    assert worker.engine.execute_claimed(ref.run_id, ref.key) == ("abandoned", [])

    record = client.store.load_run(ref.run_id)
    assert record.status == "failed" and "worker processes died" in str(record.error)
