"""A subagent declaration's model= and tools= overrides: every turn of a child of that kind runs a
subclass of the declared agent holding them, importable by path as a worker imports it, and a child
is offered only its own declared tools or the override's, never its parent's."""

from __future__ import annotations

import json

import pytest

from lg_core import Agent, Tool
from lg_core.errors import ConfigurationError
from lg_core.run import import_entrypoint
from lg_core.subagents.declarations import subagent


class ModuleResearchAgent(Agent):
    model = "scripted"
    description = "Investigates a bounded question"


class ModuleSupportAgent(Agent):
    model = "scripted"
    subagents = [subagent(ModuleResearchAgent, kind="deep-research", model="scripted:other")]


class Lookup(Tool):
    description = "Looks a policy up."

    def call(self, input):
        return "policy"


class Given(Tool):
    description = "The override's tool."

    def call(self, input):
        return "given"


def _spawn_then_answer(request) -> dict:
    """Spawn alpha synchronously, wait until it answers, then answer with its response."""
    for message in request.messages:
        if message.role != "tool":
            continue
        for block in message.content:
            text = "".join(getattr(part, "text", "") for part in block.content)
            if text.startswith("{") and '"subagents"' in text:
                views = json.loads(text)["subagents"]
                done = [v["response"] for v in views if v["status"] == "completed"]
                if done:
                    return {"text": f"child said: {done[0]}"}
    calls = sum(1 for m in request.messages if m.role == "assistant")
    if calls == 0:
        arguments = {"kind": "research", "task_name": "alpha", "task": "look"}
        return {"tool_calls": [{"id": "s1", "name": "spawn_subagent", "arguments": arguments}]}
    return {"tool_calls": [{"id": f"w{calls}", "name": "wait_for_subagents", "arguments": {}}]}


def _research(script, text: str, seen: list | None = None) -> type[Agent]:
    def turn(request):
        if seen is not None:
            seen.append(sorted(spec.name for spec in request.tools))
        return {"text": text}

    return type("ResearchAgent", (Agent,), {"model": script(turn), "description": "Investigates"})


def test_a_model_override_runs_every_turn_of_the_child_on_that_model(config, script):
    research = _research(script, "from its own model")
    other = script([{"text": "from the override"}])

    class SupportAgent(Agent):
        model = script(_spawn_then_answer)
        subagents = [subagent(research, kind="research", model=other)]
        subagent_long_poll_duration = 5.0

    run = SupportAgent.ask("help")

    assert run.completed, run.error
    assert run.response == "child said: from the override"
    assert research.model != other  # the declared class is left as it was


def test_a_tools_override_replaces_the_childs_own_tools_and_the_parents_are_not_offered(config, script):
    seen: list = []
    research = _research(script, "done", seen)
    research.tools = (Lookup,)

    class SupportAgent(Agent):
        model = script(_spawn_then_answer)
        tools = [Lookup]
        subagents = [subagent(research, kind="research", tools=[Given])]
        subagent_long_poll_duration = 5.0

    run = SupportAgent.ask("help")

    assert run.completed, run.error
    assert seen == [["given"]]
    assert research.tools == (Lookup,)


def test_without_overrides_a_child_is_offered_only_its_own_declared_tools(config, script):
    seen: list = []
    research = _research(script, "done", seen)
    research.tools = (Lookup,)

    class SupportAgent(Agent):
        model = script(_spawn_then_answer)
        tools = [Given]
        subagents = [subagent(research, kind="research")]
        subagent_long_poll_duration = 5.0

    run = SupportAgent.ask("help")

    assert run.completed, run.error
    assert seen == [["lookup"]]


def test_an_overridden_subagent_is_importable_by_its_entrypoint_path_as_a_worker_imports_it():
    (declaration,) = ModuleSupportAgent._subagent_options.declarations
    delegate = declaration.agent_class
    path = f"{delegate.__module__}:{delegate.__qualname__}"

    assert path.endswith(":ModuleSupportAgent._lg_subagent_deep_research")
    assert import_entrypoint(path) is delegate
    assert issubclass(delegate, ModuleResearchAgent) and delegate.agent_id == ModuleResearchAgent.agent_id
    assert delegate.model == "scripted:other"


@pytest.mark.parametrize("override", [{"model": "scripted:other"}, {"tools": [Given]}])
def test_an_override_with_a_factory_is_refused_naming_where_to_declare_it(override):
    with pytest.raises(ConfigurationError, match="the class the factory returns"):
        subagent(ModuleResearchAgent, kind="research", factory=lambda agent_path: ModuleResearchAgent, **override)


def test_a_tools_override_with_two_tools_of_one_name_is_refused_naming_the_fix():
    class Other(Tool):
        tool_name = "given"
        description = "Another."

        def call(self, input):
            return "other"

    with pytest.raises(ConfigurationError, match="subagent 'research': the tools= override has two tools named"):

        class SupportAgent(Agent):
            model = "scripted"
            subagents = [subagent(ModuleResearchAgent, kind="research", tools=[Given, Other])]
