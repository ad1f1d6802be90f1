"""A Swarm that cannot run as declared fails when its class is defined (and in a builder's
``validate()``), with a ConfigurationError naming the member or handoff at fault."""

from __future__ import annotations

import pytest

from lg_core import ConfigurationError, Swarm, SwarmBuilder, member
from tests.assemblies.spec_examples import (
    AccountAgent,
    BillingAgent,
    InvestigationWorkflow,
    ProblemSolverSwarm,
    TriageAgent,
)

VALID = {
    "members": [TriageAgent, BillingAgent],
    "start": TriageAgent,
    "handoffs": {TriageAgent: [BillingAgent]},
}


def declare(**attributes):
    return type("BrokenSwarm", (Swarm,), {"__module__": __name__, **VALID, **attributes})


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        (
            {"members": [TriageAgent, InvestigationWorkflow]},  # type: ignore[list-item]
            r"BrokenSwarm: member InvestigationWorkflow is not an Agent; Swarm members must be Agent classes",
        ),
        ({"members": [TriageAgent, "BillingAgent"]}, r"member 'BillingAgent' is not an Agent"),
        (
            {"handoffs": {TriageAgent: [BillingAgent, AccountAgent]}},
            r"BrokenSwarm: the handoff from triage to AccountAgent, which is not a member \(members: triage, billing\)",
        ),
        ({"handoffs": {AccountAgent: [TriageAgent]}}, r"a handoff from AccountAgent, which is not a member"),
        ({"start": AccountAgent}, r"BrokenSwarm: start AccountAgent, which is not a member"),
        ({"start": None}, r"BrokenSwarm declares no start member"),
        ({"handoffs": {}}, r"member billing is reached by no handoff from the start member triage"),
        ({"handoffs": {TriageAgent: [TriageAgent, BillingAgent]}}, r"a handoff from triage to itself"),
        (
            {"handoffs": {TriageAgent: [BillingAgent, "billing"]}},
            r"the handoff from triage to billing is declared twice",
        ),
        ({"handoffs": [(TriageAgent, BillingAgent)]}, r"BrokenSwarm.handoffs must be a dict"),
        (
            {"members": [TriageAgent, TriageAgent]},
            r"two members are named 'triage'; give one of them another name with as_=",
        ),
        ({"max_steps": 0}, r"BrokenSwarm.max_steps must be a positive integer, got 0"),
        ({"max_steps": 2.5}, r"BrokenSwarm.max_steps must be a positive integer"),
        ({"max_handoff_repeats": -1}, r"BrokenSwarm.max_handoff_repeats must be a positive integer or None"),
        (
            {"handoff": (TriageAgent, BillingAgent)},
            r"declares `handoff`, which a swarm does not read: declare its routes in `handoffs",
        ),
        ({"member": TriageAgent}, r"declares `member`, which a swarm does not read: declare its Agents in `members"),
        ({"members": TriageAgent}, r"BrokenSwarm.members must be a list"),
    ],
)
def test_an_invalid_swarm_is_refused_naming_the_member_or_route(attributes, message):
    with pytest.raises(ConfigurationError, match=message):
        declare(**attributes)


def test_members_are_named_by_as_and_may_be_referred_to_by_that_name():
    swarm = declare(
        members=[TriageAgent, member(BillingAgent, as_="refunds"), member(BillingAgent, as_="disputes")],
        handoffs={"triage": ["refunds", "disputes"]},
    )
    spec = swarm.definition().spec
    assert [item.name for item in spec.members] == ["triage", "refunds", "disputes"]
    assert spec.handoffs == {"triage": ("refunds", "disputes")}


def test_an_agent_that_two_members_run_is_ambiguous_as_a_route_target():
    with pytest.raises(
        ConfigurationError, match=r"BillingAgent is ambiguous: members refunds, disputes run that Agent"
    ):
        declare(
            members=[TriageAgent, member(BillingAgent, as_="refunds"), member(BillingAgent, as_="disputes")],
            handoffs={TriageAgent: [BillingAgent]},
        )


def test_member_refuses_an_assembly_that_is_not_an_agent_where_it_is_declared():
    with pytest.raises(ConfigurationError, match=r"^member InvestigationWorkflow is not an Agent; Swarm members must"):
        member(InvestigationWorkflow)
    with pytest.raises(ConfigurationError, match=r"^member InvestigationWorkflow is not an Agent"):
        SwarmBuilder(id="s").member(InvestigationWorkflow)


def test_a_member_policy_needs_retry_on_for_its_retries():
    with pytest.raises(ConfigurationError, match=r"member\('AccountAgent'\): retries=1 needs retry_on"):
        member(AccountAgent, retries=1)


def test_the_swarm_builder_declares_the_same_swarm_and_refuses_the_same_faults():
    builder = SwarmBuilder(id="problem_solver")
    builder.member(TriageAgent).member(BillingAgent).member(AccountAgent, history=True, context=True)
    builder.start(TriageAgent)
    builder.handoff(TriageAgent, to=[BillingAgent, AccountAgent])
    builder.handoff(BillingAgent, to=TriageAgent)
    with pytest.raises(ConfigurationError, match=r"SwarmBuilder\('problem_solver'\).*the handoff from billing to"):
        builder.handoff(BillingAgent, to=InvestigationWorkflow).validate()


def test_a_swarm_builder_seeded_by_a_class_keeps_its_declarations():
    definition = ProblemSolverSwarm.to_builder().definition()
    assert definition.spec == ProblemSolverSwarm.definition().spec
    assert (definition.assembly_id, definition.implementation) == ("problem_solver", ProblemSolverSwarm)
