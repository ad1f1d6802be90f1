"""Delegation declarations are checked when made, naming what to fix."""

import pytest

from lg_core import Agent, Tool
from lg_core.errors import ConfigurationError
from lg_core.subagents.declarations import (
    agent_as_tool,
    agents_as_tools,
    assemblies_as_tools,
    assembly_as_tool,
    check_long_poll_duration,
    subagent,
)
from lg_core.subagents.definition import Definition


class ResearchAgent(Agent):
    model = "scripted"
    description = "Investigates policies and account history"


class SentimentAgent(Agent):
    model = "scripted"
    description = "Classifies the customer's sentiment"


class UndescribedAgent(Agent):
    model = "scripted"


class LookupTool(Tool):
    description = "Look something up."

    def call(self, input):
        return "found"


class FakeGraph:
    """Stands for a composite assembly: what the declarations read is its kind, id and description."""

    assembly_kind = "graph"
    assembly_id = "investigation"
    description = "Investigates a support request"


def test_subagent_defaults_its_kind_and_description_to_the_agents():
    declared = subagent(ResearchAgent)
    assert (declared.kind, declared.description, declared.persist) == (
        "research",
        "Investigates policies and account history",
        True,
    )
    definition = declared.definition()
    assert isinstance(definition, Definition)
    assert definition.factory("/root/policy_check") is ResearchAgent


def test_subagent_takes_an_explicit_kind_description_and_persistence():
    declared = subagent(ResearchAgent, kind="deep-research", description="Digs deeper", persist=False)
    assert (declared.kind, declared.description, declared.persist) == ("deep-research", "Digs deeper", False)
    assert declared.definition().persist is False


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (lambda: subagent(LookupTool), "subagent takes an Agent class, got LookupTool"),
        (lambda: subagent(ResearchAgent()), "subagent takes an Agent class, got a ResearchAgent"),  # type: ignore[arg-type]
        (lambda: subagent(FakeGraph), "subagent takes an Agent class, got FakeGraph"),
        (lambda: subagent(ResearchAgent, kind="Research"), "a subagent kind must be"),
        (lambda: subagent(UndescribedAgent), "needs a description the model can choose it by"),
        (lambda: subagent(ResearchAgent, description="x" * 1025), "at most 1024"),
        (lambda: subagent(ResearchAgent, persist="yes"), "persist must be True or False"),  # type: ignore[arg-type]
        (lambda: subagent(ResearchAgent, factory="ResearchAgent"), "factory must be callable"),  # type: ignore[arg-type]
        (lambda: subagent(ResearchAgent, factory=lambda: ResearchAgent), "must accept the agent path"),
        (lambda: subagent(ResearchAgent, tools=[LookupTool()]), "tool overrides must be Tool classes"),  # type: ignore[list-item]
        (lambda: subagent(ResearchAgent, tools=LookupTool), "tools= must be a list of Tool classes"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_subagent_declaration_is_refused(call, problem):
    with pytest.raises(ConfigurationError, match=problem):
        call()


def test_a_factory_taking_the_conversation_id_is_checked_for_two_arguments():
    with pytest.raises(ConfigurationError, match="the agent path and the conversation id"):
        Definition("research", "Digs", lambda path: ResearchAgent, accepts_conversation_id=True)
    definition = Definition(
        "research", "Digs", lambda path, conversation_id: ResearchAgent, accepts_conversation_id=True
    )
    assert definition.factory("/root/a", "c-1") is ResearchAgent


def test_a_definition_knows_whether_its_factory_takes_the_runtime():
    assert Definition("a", "d", lambda path, *, runtime=None: ResearchAgent).factory_takes_runtime
    assert Definition("a", "d", lambda path, **options: ResearchAgent).factory_takes_runtime
    assert not Definition("a", "d", lambda path: ResearchAgent).factory_takes_runtime


def test_agent_as_tool_defaults_to_the_agents_id_and_description():
    declared = agent_as_tool(SentimentAgent)
    assert (declared.name, declared.description, declared.preserve_context) == (
        "sentiment",
        "Classifies the customer's sentiment",
        False,
    )
    renamed = agent_as_tool(SentimentAgent, name="classify_sentiment", tools=[LookupTool], preserve_context=True)
    assert (renamed.name, renamed.tools, renamed.preserve_context) == ("classify_sentiment", (LookupTool,), True)


def test_assembly_as_tool_takes_a_composite_but_refuses_agent_only_overrides():
    declared = assembly_as_tool(FakeGraph, name="investigate_support_request")
    assert (declared.name, declared.assembly_kind) == ("investigate_support_request", "graph")
    with pytest.raises(ConfigurationError, match="model= overrides an Agent's own model; a graph has no single"):
        assembly_as_tool(FakeGraph, model="scripted")
    with pytest.raises(ConfigurationError, match="tools= overrides"):
        assembly_as_tool(FakeGraph, tools=[LookupTool])
    assert assembly_as_tool(SentimentAgent, model="scripted").model == "scripted"


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (lambda: agent_as_tool(FakeGraph), "agent_as_tool takes an Agent class, got FakeGraph"),
        (lambda: assembly_as_tool(LookupTool), "an Agent, Workflow, Swarm or Graph class, got LookupTool"),
        (lambda: agent_as_tool(SentimentAgent, name="classify sentiment"), "the name must be 1-64 letters"),
        (lambda: agent_as_tool(UndescribedAgent), "needs a description the model can choose it by"),
        (lambda: agent_as_tool(SentimentAgent, preserve_context=1), "preserve_context must be True or False"),  # type: ignore[arg-type]
        (lambda: agents_as_tools(SentimentAgent, ResearchAgent, name="x"), "one name= cannot name them all"),
    ],
)
def test_a_bad_tool_declaration_is_refused(call, problem):
    with pytest.raises(ConfigurationError, match=problem):
        call()


def test_the_plural_forms_declare_one_tool_per_class_with_shared_options():
    declared = agents_as_tools(SentimentAgent, ResearchAgent, preserve_context=True)
    assert [(d.name, d.preserve_context) for d in declared] == [("sentiment", True), ("research", True)]
    assert [d.name for d in assemblies_as_tools(FakeGraph, SentimentAgent)] == ["investigation", "sentiment"]


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan"), True, "30"])
def test_a_long_poll_duration_must_be_a_positive_finite_number(value):
    with pytest.raises(ConfigurationError, match="subagent_long_poll_duration must be a positive number"):
        check_long_poll_duration(value, "CustomerSupportAgent")


def test_a_long_poll_duration_is_normalized_to_a_float():
    assert check_long_poll_duration(5, "A") == 5.0
