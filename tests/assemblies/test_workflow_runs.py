"""Workflow runs in local mode: ``perform`` replayed from the top, each ``invoke`` a durable child run.

The scripted models answer each child; the assertions read the run's outcome, its answer,
its trajectory and the child runs the calls left in the store.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

import lg_core
from lg_core import Agent, Graph, Workflow, edge
from lg_core.assemblies.workflow import WorkflowBuilder
from lg_core.errors import (
    AssemblyStepTimeoutError,
    ConfigurationError,
    InvocationError,
    ProtocolError,
    ProviderError,
    ReplayDivergenceError,
    RunStateError,
)
from lg_core.messages import Message
from tests.assemblies import resumable_graph, resumable_workflow


def agent(name: str, target: str) -> type[Agent]:
    return type(name, (Agent,), {"model": target})


def last_input(request) -> str:
    return request.messages[-1].text


def echo(script, name: str, prefix: str) -> type[Agent]:
    return agent(name, script(lambda request: {"text": prefix + last_input(request)}))


def test_a_sequential_workflow_feeds_one_output_into_the_final_call(config, script):
    research = agent("ResearchAgent", script([{"text": "transfer 481 awaits settlement"}]))
    support = echo(script, "SupportAgent", "answer: ")

    class ResponseWorkflow(Workflow):
        def perform(self):
            found = self.invoke(research, as_="research").output
            return self.invoke(support, input=f"{self.input.text}\n\nVerified research:\n{found}", as_="respond")

    run = ResponseWorkflow.ask("Why is transfer 481 pending?")

    assert run.completed, run.error
    assert run.result.text == (
        "answer: Why is transfer 481 pending?\n\nVerified research:\ntransfer 481 awaits settlement"
    )
    trajectory = run.result.trajectory
    assert [step.participant for step in trajectory] == ["research", "respond"]
    assert trajectory.find("research").output == "transfer 481 awaits settlement"
    assert trajectory.find("respond").assembly_kind == "agent"
    children = [s for s in config.runtime().store.list_runs() if s.id != run.id]
    assert len(children) == 2 and all(child.status == "completed" for child in children)


def test_a_fork_of_a_workflow_run_is_refused_and_its_retry_needs_an_importable_class(config, script):
    flaky = agent("FlakyAgent", script([{"error": "provider down"}]))

    class Failing(Workflow):
        def perform(self):
            return self.invoke(flaky)

    run = Failing.ask("Go")
    assert run.failed

    with pytest.raises(RunStateError, match="cannot import the run's entrypoint"):
        lg_core.retry(run.id)  # a class defined in a function: no process could rebuild the run
    with pytest.raises(InvocationError, match="workflow run, which cannot be forked"):
        lg_core.fork(run.id, from_step="root/perform")


def test_only_the_final_calls_text_streams_to_the_caller(config, script):
    research = agent("ResearchAgent", script(lambda request: {"text": "internal notes"}))
    support = echo(script, "SupportAgent", "answer: ")

    class ResponseWorkflow(Workflow):
        def perform(self):
            notes = self.invoke(research).output
            return self.invoke(support, input=f"given {notes}")

    events = list(stream := ResponseWorkflow.stream_ask("Why?"))

    assert stream.completed, stream.error
    streamed = "".join(event.data.get("text", "") for event in events if event.type == "text_delta")
    assert streamed == "answer: given internal notes"


def test_a_routed_workflow_branches_on_an_intermediate_output(config, script):
    def build(route: str):
        triage = agent("TriageAgent", script([{"text": route}]))
        billing = echo(script, "BillingAgent", "billing: ")
        general = echo(script, "GeneralAgent", "general: ")

        class RoutedWorkflow(Workflow):
            def perform(self):
                if self.invoke(triage, as_="triage").output == "billing":
                    return self.invoke(billing, as_="billing_response")
                return self.invoke(general, as_="general_response")

        return RoutedWorkflow

    billing_run = build("billing").ask("Charged twice")
    general_run = build("other").ask("Hello")

    assert billing_run.result.text == "billing: Charged twice"
    assert [s.participant for s in billing_run.result.trajectory] == ["triage", "billing_response"]
    assert general_run.result.text == "general: Hello"


def test_parallel_calls_run_at_once_each_with_its_own_copy_of_the_context(config, script):
    barrier = threading.Barrier(2, timeout=20)
    seen: list[dict] = []

    def meets(text):
        def reply(request):
            barrier.wait()  # both children must be running at once, or this times out
            return {"text": text}

        return reply

    ledger = agent("LedgerAgent", script(meets("ledger ok")))
    policy = agent("PolicyAgent", script(meets("policy ok")))
    support = echo(script, "SupportAgent", "answer: ")

    class InvestigationWorkflow(Workflow):
        def perform(self):
            findings = self.parallel(
                self.invoke(ledger, as_="ledger"), self.invoke(policy, as_="policy"), max_concurrency=2
            )
            seen.append(dict(self.context))
            return self.invoke(support, input="\n".join(findings), as_="respond")

    run = InvestigationWorkflow.ask("Why?", context={"tenant": "acme"})

    assert run.completed, run.error
    assert run.result.text == "answer: ledger ok\npolicy ok"
    trajectory = run.result.trajectory
    assert trajectory.concurrent(trajectory.find("ledger"), trajectory.find("policy"))
    assert seen[-1] == {"tenant": "acme"}
    children = {r.id: r for r in config.runtime().store.list_runs() if r.id != run.id}
    contexts = [config.runtime().store.load_run(i).invocation.get("context") for i in children]
    assert all(context == {"tenant": "acme"} for context in contexts)


def test_max_concurrency_one_runs_parallel_calls_one_after_another(config, script):
    first, second = echo(script, "FirstAgent", "1: "), echo(script, "SecondAgent", "2: ")

    class OneAtATime(Workflow):
        def perform(self):
            outputs = self.parallel(self.invoke(first, as_="a"), self.invoke(second, as_="b"), max_concurrency=1)
            return self.invoke(first, input=" | ".join(outputs), as_="final")

    run = OneAtATime.ask("x")

    assert run.completed, run.error
    trajectory = run.result.trajectory
    assert not trajectory.concurrent(trajectory.find("a"), trajectory.find("b"))


def test_a_workflow_runs_as_a_graph_node_and_a_graph_inside_a_workflow(config, script):
    intake = agent("IntakeAgent", script(lambda request: {"text": "intake done"}))
    support = echo(script, "SupportAgent", "answer: ")

    class InnerWorkflow(Workflow):
        def perform(self):
            noted = self.invoke(intake, as_="intake").output
            return self.invoke(support, input=noted, as_="respond")

    class OuterGraph(Graph):
        nodes = {"first": intake, "flow": InnerWorkflow}
        start = "first"
        edges = [edge("first", "flow")]
        finish = "flow"

    graph_run = OuterGraph.ask("Help")
    assert graph_run.completed, graph_run.error
    assert graph_run.result.text == "answer: intake done"
    assert graph_run.result.trajectory.find("flow").assembly_kind == "workflow"

    class GraphInside(Workflow):
        def perform(self):
            return self.invoke(OuterGraph, as_="graph")

    run = GraphInside.ask("Help")
    assert run.completed, run.error
    assert run.result.text == "answer: intake done"
    assert run.result.trajectory.find("graph").assembly_kind == "graph"

    class WorkflowInside(Workflow):
        def perform(self):
            inner = self.invoke(InnerWorkflow, as_="inner").output
            return self.invoke(support, input=inner, as_="outer")

    run = WorkflowInside.ask("Help")
    assert run.completed, run.error
    assert run.result.text == "answer: answer: intake done"
    assert run.result.trajectory.find("inner").assembly_kind == "workflow"


def test_a_model_override_is_refused_before_a_workflow_run_exists(config, script):
    support = echo(script, "SupportAgent", "")

    class Simple(Workflow):
        def perform(self):
            return self.invoke(support)

    with pytest.raises(InvocationError, match="model_override"):
        Simple.ask("Hi", model_override="scripted:other")


DECISION = {"agent": "first"}


def test_a_perform_asking_for_another_child_on_replay_fails_with_replay_divergence(config, script):
    DECISION["agent"] = "first"
    first = agent("FirstAgent", script([{"text": "one"}]))
    second = agent("SecondAgent", script(lambda request: {"text": "two"}))

    class Fickle(Workflow):
        def perform(self):
            chosen = first if DECISION["agent"] == "first" else second
            DECISION["agent"] = "second"  # a module global read by perform changes between replays
            assert self.invoke(chosen).output
            return self.invoke(second, as_="final")

    run = Fickle.ask("x")

    assert run.failed
    assert isinstance(run.error, ReplayDivergenceError)
    assert "first" in str(run.error) and "second" in str(run.error)


def test_a_call_is_retried_on_a_listed_error_and_each_attempt_is_a_child_run(config, script):
    answers = iter([{"error": "provider down"}, {"text": "recovered"}])  # a scripted list restarts per run
    flaky = agent("FlakyAgent", script(lambda request: next(answers)))

    class Retrying(Workflow):
        def perform(self):
            return self.invoke(flaky, as_="flaky", retries=1, retry_on=ProviderError)

    run = Retrying.ask("x")

    assert run.completed, run.error
    assert run.result.text == "recovered"
    attempts = run.result.trajectory.find("flaky").attempts
    assert [attempt.status for attempt in attempts] == ["failed", "completed"]


def test_an_error_not_listed_in_retry_on_fails_the_run_at_once(config, script):
    flaky = agent("FlakyAgent", script([{"error": "provider down"}, {"text": "never"}]))

    class NotRetrying(Workflow):
        def perform(self):
            return self.invoke(flaky, retries=2, retry_on=ValueError)

    run = NotRetrying.ask("x")

    assert run.failed
    assert isinstance(run.error, ProviderError)


def test_a_call_over_its_timeout_fails_with_an_assembly_step_timeout_error(config, script):
    def slow(request):
        time.sleep(1.5)
        return {"text": "too late"}

    sleepy = agent("SleepyAgent", script(slow))

    class Impatient(Workflow):
        def perform(self):
            return self.invoke(sleepy, as_="sleepy", timeout=0.3)

    run = Impatient.ask("x")

    assert run.failed
    assert isinstance(run.error, AssemblyStepTimeoutError), run.error


def test_a_consumed_final_invocation_fails_the_run_with_a_protocol_error(config, script):
    support = echo(script, "SupportAgent", "answer: ")

    class Consuming(Workflow):
        def perform(self):
            final = self.invoke(support)
            assert final.output
            return final

    class ReturnsText(Workflow):
        def perform(self):
            return self.invoke(support).output

    for workflow in (Consuming, ReturnsText):
        run = workflow.ask("x")
        assert run.failed
        assert isinstance(run.error, ProtocolError)


def test_a_perform_that_raises_fails_the_run_naming_the_error(config, script):
    class Broken(Workflow):
        def perform(self):
            raise ValueError("no route for this request")

    run = Broken.ask("x")

    assert run.failed
    assert "no route for this request" in str(run.error)
    assert "ValueError" in repr(run.error) or isinstance(run.error, ValueError)


def test_a_calls_retry_starts_no_sooner_than_its_retry_delay_after_the_failed_attempt_ended(config, script):
    calls: list[int] = []

    def reply(request):
        calls.append(1)
        return {"error": "provider down"} if len(calls) == 1 else {"text": "settled"}

    flaky = agent("FlakyAgent", script(reply))

    class Delayed(Workflow):
        def perform(self):
            return self.invoke(flaky, retries=1, retry_on=ProviderError, retry_delay=0.4)

    run = Delayed.ask("x")

    assert run.completed, run.error
    assert run.response == "settled"
    first, second = run.result.trajectory.steps[0].attempts
    assert (second.started_at - first.finished_at).total_seconds() >= 0.4
    assert len(calls) == 2


def test_stream_ask_ask_async_and_start_execution_run_a_workflow_like_an_agent(config, script):
    support = echo(script, "SupportAgent", "answer: ")

    class Simple(Workflow):
        def perform(self):
            return self.invoke(support)

    events = list(stream := Simple.stream_ask("Why?"))
    assert events[0].type == "invocation_start" and events[-1].type == "run_stop"
    assert stream.completed and stream.response == "answer: Why?"
    streamed = "".join(event.data.get("text", "") for event in events if event.type == "text_delta")
    assert streamed == "answer: Why?"  # the final call's text reaches the workflow's caller

    run = asyncio.run(Simple.ask_async("Why?"))
    assert run.completed, run.error

    execution = Simple.start_execution("Why?")
    finished = execution.wait(timeout=30)
    assert finished.completed, finished.error
    assert finished.result.text == "answer: Why?"
    assert len(finished.result.trajectory) == 1


@pytest.mark.parametrize("history", [True, False])
def test_a_child_gets_the_callers_history_unless_the_call_passes_its_own(config, script, history):
    seen: list[int] = []

    def reply(request):
        seen.append(len(request.messages))
        return {"text": "ok"}

    support = agent("SupportAgent", script(reply))

    class Forwarding(Workflow):
        def perform(self):
            return self.invoke(support) if history else self.invoke(support, history=[])

    run = Forwarding.ask("now", history=[Message("user", "before"), Message("assistant", "ok")])

    assert run.completed, run.error
    assert seen == [3 if history else 1]


def test_cancelling_a_workflow_run_cancels_the_call_running_and_ends_the_run_cancelled(config, script):
    slow = agent("SlowAgent", script([{"text": "late", "delay": 30}]))

    class SlowWorkflow(Workflow):
        def perform(self):
            return self.invoke(slow, as_="slow")

    run = SlowWorkflow.stream_ask("Go")
    events = iter(run)
    assert next(events).type == "invocation_start"
    timer = threading.Timer(0.3, run.cancel)
    timer.start()
    rest = list(events)
    timer.join()

    assert run.cancelled
    assert rest[-1].type == "run_cancel"
    children = [r for r in config.runtime().store.list_runs() if r.id != run.id]
    assert [child.status for child in children] == ["cancelled"]


def test_a_workflow_deadline_reaches_its_call_and_ends_the_run_partial(config, script):
    slow = agent("SlowAgent", script([{"text": "late", "delay": 30}]))

    class SlowWorkflow(Workflow):
        def perform(self):
            return self.invoke(slow, as_="slow")

    started = time.monotonic()
    run = SlowWorkflow.ask("Go", deadline_at=datetime.now(UTC) + timedelta(seconds=0.5))

    assert run.partial
    assert time.monotonic() - started < 10


def test_a_workflow_run_stopped_mid_call_resumes_without_running_a_settled_call_again(file_config):
    resumable_graph.CALLS.clear()
    resumable_graph.INTERRUPT_AT[:] = [2]  # the second call's tool call stops the process
    with pytest.raises(KeyboardInterrupt):
        resumable_workflow.ResumableWorkflow.ask("Go", run_id="workflow-stopped")
    assert len(resumable_graph.CALLS) == 2

    resumed = lg_core.resume("workflow-stopped")

    assert resumed.completed, resumed.error
    assert [step.participant for step in resumed.result.trajectory] == ["first", "second"]
    first, second, again = resumable_graph.CALLS
    assert second == again != first  # the second call's child went on under its own key; the first never re-ran
    read_back = file_config.runtime().get_run("workflow-stopped")  # as another process reads it
    assert read_back.result.text == resumed.result.text
    assert [step.participant for step in read_back.result.trajectory] == ["first", "second"]


def test_invoking_a_builders_definition_is_refused_with_a_configuration_error(config, script):
    support = echo(script, "SupportAgent", "")
    builder = WorkflowBuilder(id="built_flow")
    builder.perform(lambda workflow: workflow.invoke(support))
    inner = builder.definition()

    class CallsADefinition(Workflow):
        def perform(self):
            return self.invoke(inner, as_="inner")

    run = CallsADefinition.ask("x")

    assert run.failed
    assert isinstance(run.error, ConfigurationError)
    assert "cannot run as a child run yet" in str(run.error)
