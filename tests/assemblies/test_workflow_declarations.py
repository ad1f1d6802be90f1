"""A Workflow's ``perform`` records lazy calls; a host (the engine, in a run) executes them.

These tests drive the guide's workflows with a host that answers from a table, checking
what ``invoke`` records, when ``.output`` asks the host, what ``parallel`` hands it, and the
ProtocolError for a ``perform`` that does not return its final invocation unconsumed.
"""

from __future__ import annotations

import pytest

from lg_core import (
    AssemblyError,
    ConfigurationError,
    InvocationError,
    ProtocolError,
    ProviderError,
    ReplayDivergenceError,
    Workflow,
    WorkflowBuilder,
)
from lg_core.assemblies.workflow_invocation import check_same_call
from lg_core.messages import Message
from lg_core.run_result import RunResult
from lg_core.usage import Usage
from tests.assemblies import spec_examples as examples


def answer(text):
    return RunResult(
        message=Message(role="assistant", content=text), stop_reason="end_turn", usage=Usage(), messages=(), state={}
    )


class TableHost:
    """Answers each child by its participant name, and records what it was asked."""

    def __init__(self, **answers):
        self.answers = answers
        self.ran: list[str] = []
        self.parallel: list[tuple[list[str], int | None]] = []

    def run_invocation(self, invocation):
        self.ran.append(invocation.request.name)
        return answer(self.answers[invocation.request.name])

    def run_parallel(self, invocations, max_concurrency):
        self.parallel.append(([item.request.name for item in invocations], max_concurrency))
        return [answer(self.answers[item.request.name]) for item in invocations]


def test_response_workflow_runs_research_and_returns_the_responder_unconsumed():
    host = TableHost(research="Transfer 481 awaits the receiving bank.")
    workflow = examples.ResponseWorkflow("Why is transfer 481 pending?", host=host)
    final = workflow.final_invocation(workflow.perform())
    assert host.ran == ["research"]
    assert final.request.participant is examples.CustomerSupportAgent
    assert final.request.name == "customer_support" and not final.consumed
    assert final.request.input == (
        "Why is transfer 481 pending?\n\nVerified research:\nTransfer 481 awaits the receiving bank."
    )
    assert [item.request.index for item in workflow.invocations] == [0, 1]


@pytest.mark.parametrize(("route", "chosen"), [("billing", "billing_response"), ("other", "general_response")])
def test_routed_response_workflow_branches_in_python_on_the_triage_output(route, chosen):
    workflow = examples.RoutedResponseWorkflow("Charged twice", host=TableHost(triage=route))
    assert workflow.final_invocation(workflow.perform()).request.name == chosen


def test_investigation_workflow_hands_both_researchers_to_the_host_at_once_with_its_bound():
    host = TableHost(ledger_research="awaiting settlement", policy_research="two business days")
    workflow = examples.InvestigationWorkflow("Why is transfer 481 pending?", host=host)
    final = workflow.final_invocation(workflow.perform())
    assert host.parallel == [(["ledger_research", "policy_research"], 2)] and host.ran == []
    assert final.request.input.endswith("Findings:\nawaiting settlement\ntwo business days")


def test_reading_output_twice_asks_the_host_once():
    host = TableHost(research="r")
    workflow = examples.ResponseWorkflow("q", host=host)
    call = workflow.invoke(examples.ResearchAgent, as_="research")
    assert (call.output, call.output) == ("r", "r")
    assert host.ran == ["research"]


def test_a_perform_returning_a_consumed_invocation_or_a_string_is_a_protocol_error():
    class ConsumingWorkflow(Workflow):
        def perform(self):
            call = self.invoke(examples.CustomerSupportAgent)
            call.output  # noqa: B018 - consumes it
            return call

    workflow = ConsumingWorkflow("q", host=TableHost(customer_support="a"))
    with pytest.raises(ProtocolError, match=r"ConsumingWorkflow.perform returned .*whose output was already read"):
        workflow.final_invocation(workflow.perform())
    with pytest.raises(ProtocolError, match=r"ConsumingWorkflow.perform returned str; it must return its final"):
        workflow.final_invocation("a")


def test_an_invocation_of_another_workflow_is_not_this_ones_final_invocation():
    first = examples.ResponseWorkflow("q")
    other = examples.ResponseWorkflow("q")
    with pytest.raises(ProtocolError, match=r"takes invocations made by this workflow's invoke"):
        first.final_invocation(other.invoke(examples.ResearchAgent))


def test_outside_a_run_a_call_is_declared_but_cannot_run():
    workflow = examples.ResponseWorkflow("q")
    call = workflow.invoke(examples.ResearchAgent)
    with pytest.raises(AssemblyError, match=r"cannot run: this ResponseWorkflow instance is not executing in a run"):
        call.output  # noqa: B018


def test_invoke_records_the_per_call_history_context_and_policy():
    workflow = examples.ResponseWorkflow("q")
    call = workflow.invoke(
        examples.ResearchAgent,
        history=[],
        context={"account": {"id": 7}},
        timeout=15,
        retries=2,
        retry_on=[ProviderError],
        retry_delay=0.25,
    )
    request = call.request
    assert (request.history, request.context) == ((), {"account": {"id": 7}})
    assert (request.policy.timeout, request.policy.retries, request.policy.retry_on) == (15.0, 2, (ProviderError,))
    inherited = workflow.invoke(examples.ResearchAgent).request
    assert (inherited.history, inherited.context, inherited.input) == (None, None, None)


def test_a_context_given_to_a_call_is_copied():
    workflow = examples.ResponseWorkflow("q")
    context = {"account": {"id": 7}}
    call = workflow.invoke(examples.ResearchAgent, context=context)
    context["account"]["id"] = 8
    assert call.request.context == {"account": {"id": 7}}


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"retries": 1}, ConfigurationError, r"retries=1 needs retry_on"),
        ({"as_": "no spaces"}, ConfigurationError, r"as_ must be a name"),
        ({"context": {"when": object()}}, InvocationError, r"context must be JSON-like"),
    ],
)
def test_invoke_refuses_bad_arguments_where_they_are_passed(options, error, message):
    with pytest.raises(error, match=message):
        examples.ResponseWorkflow("q").invoke(examples.ResearchAgent, **options)


def test_invoke_refuses_a_participant_that_is_not_an_assembly():
    with pytest.raises(ConfigurationError, match=r"ResponseWorkflow.invoke: 'ResearchAgent' is not an assembly"):
        examples.ResponseWorkflow("q").invoke("ResearchAgent")


def test_parallel_takes_only_pending_invocations_and_a_positive_bound():
    workflow = examples.InvestigationWorkflow("q", host=TableHost(ledger_research="a"))
    done = workflow.invoke(examples.LedgerResearchAgent)
    done.output  # noqa: B018
    with pytest.raises(ProtocolError, match=r"was already consumed; parallel takes pending invocations"):
        workflow.parallel(done)
    with pytest.raises(ConfigurationError, match=r"max_concurrency must be a positive integer or None"):
        workflow.parallel(workflow.invoke(examples.PolicyResearchAgent), max_concurrency=0)


@pytest.mark.parametrize(
    ("perform", "message"),
    [
        (staticmethod(lambda: None), r"must be an ordinary method"),
        (lambda self, extra: None, r"must take only self"),
    ],
)
def test_a_perform_the_workflow_could_not_call_is_refused_when_the_class_is_defined(perform, message):
    with pytest.raises(ConfigurationError, match=message):
        type("BrokenWorkflow", (Workflow,), {"__module__": __name__, "perform": perform})


def test_an_async_perform_is_refused():
    with pytest.raises(ConfigurationError, match=r"not async or a generator"):

        class AsyncWorkflow(Workflow):
            async def perform(self):
                return None


def test_a_workflow_builder_takes_its_composition_as_a_function_of_the_workflow():
    builder = WorkflowBuilder(id="dynamic_response", description="Answers after research")

    with pytest.raises(ConfigurationError, match=r"has no composition; give it one with .perform"):
        builder.validate()

    @builder.perform
    def compose(workflow):
        return workflow.invoke(examples.CustomerSupportAgent)

    definition = builder.definition()
    assert (definition.kind, definition.assembly_id, definition.description) == (
        "workflow",
        "dynamic_response",
        "Answers after research",
    )
    assert definition.spec.perform is compose and definition.implementation is Workflow


def test_a_replay_asking_for_the_same_call_at_a_position_passes_and_another_call_diverges():
    first = examples.RoutedResponseWorkflow("q")
    recorded = first.invoke(examples.BillingAgent, as_="billing_response").request.signature()
    assert recorded == {"index": 0, "name": "billing_response", "assembly_id": "billing", "assembly_kind": "agent"}
    again = examples.RoutedResponseWorkflow("q").invoke(examples.BillingAgent, as_="billing_response", input="new")
    check_same_call(recorded, again.request, "RoutedResponseWorkflow")
    other = examples.RoutedResponseWorkflow("q").invoke(examples.CustomerSupportAgent, as_="general_response")
    with pytest.raises(
        ReplayDivergenceError,
        match=r"RoutedResponseWorkflow.perform diverged on replay at call #0: it first invoked billing_response "
        r"\(agent billing\), and now invokes general_response \(agent customer_support\)",
    ):
        check_same_call(recorded, other.request, "RoutedResponseWorkflow")


def test_an_abstract_assembly_is_not_a_participant():
    with pytest.raises(ConfigurationError, match=r"invoke: Workflow declares no complete workflow, so it cannot run"):
        examples.ResponseWorkflow("q").invoke(Workflow)
