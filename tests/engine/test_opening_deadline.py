"""A deadline raised while a run opens (an opening callback's context.check()).

Opener.open catches CancelledError and Exception; DeadlineExceededError derives
from BaseException and is neither, so it escapes the step: the run is not ended
``partial`` (what a deadline does everywhere else) and stays ``running``.
"""

from __future__ import annotations

import time

from lg_core import Agent, Configuration, before_invocation, with_configuration


class CheckingAgent(Agent):
    system_prompt = "Answer briefly."

    @classmethod
    def select_model(cls, invocation):
        return invocation["target"]

    @before_invocation
    def load_profile(self, payload, context):
        time.sleep(0.05)  # e.g. a slow profile lookup ...
        context.check()  # ... that checks the deadline afterwards, as long-running code should
        return None


def test_a_deadline_passing_in_an_opening_callback_ends_a_local_run_partial(file_config, script):
    target = script([{"text": "never"}])

    run = CheckingAgent.ask("Hi", target=target, deadline=0.01)

    assert run.outcome == "partial"
    assert file_config.runtime().store.load_run(run.id).status == "partial"


def test_a_deadline_passing_in_an_opening_callback_ends_a_distributed_run_partial(tmp_path, script):
    target = script([{"text": "never"}])
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    client_config, worker_config = Configuration(run_store=url), Configuration(run_store=url)
    client, worker = client_config.runtime(), worker_config.runtime()
    try:
        with with_configuration(client_config):
            (ref,) = client.begin(CheckingAgent.build_run("Hi", target=target, deadline=0.01), distributed=True)
        with with_configuration(worker_config):
            try:
                worker.engine.execute_claimed(ref.run_id, ref.key)
            except BaseException as exc:  # noqa: BLE001 - what the Celery task would raise
                escaped = exc
            else:
                escaped = None
        step = client.store.load_step(ref.run_id, ref.key)
        record = client.store.load_run(ref.run_id)
        assert escaped is None, (
            f"{type(escaped).__name__} escaped; run {record.status}, step {step.status} held by {step.holder}"
        )
        assert record.status == "partial"
    finally:
        client_config.close()
        worker_config.close()
