"""Agents and assemblies as tools, in local mode: each call runs the delegate as a child run of the parent
run (nested on the tool call's thread), whose answer, failure, usage and events reach the parent."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from lg_core import Agent, Graph, Tool, edge
from lg_core.agent_stream import AgentStreamSource
from lg_core.assemblies.assembly_tools import MAX_MESSAGE_CHARS
from lg_core.assemblies.child_runs import child_run_id
from lg_core.errors import ConfigurationError
from lg_core.run import import_entrypoint
from lg_core.subagents.declarations import agent_as_tool, agents_as_tools, assemblies_as_tools, assembly_as_tool


class ModuleHelperAgent(Agent):
    model = "scripted"
    description = "Helps"


class ModuleSupportAgent(Agent):
    model = "scripted"
    tools = [agent_as_tool(ModuleHelperAgent, name="helper", model="scripted:other")]


def agent(name: str, target: str, **attributes) -> type[Agent]:
    return type(name, (Agent,), {"model": target, "description": f"The {name}", **attributes})


def call(tool: str, message: str, call_id: str = "c1") -> dict:
    return {"tool_calls": [{"id": call_id, "name": tool, "arguments": {"message": message}}]}


def tool_results(run) -> list:
    return [block for message in run.result.messages if message.role == "tool" for block in message.content]


def test_the_model_sees_an_agent_tool_with_its_name_description_and_one_message_input(config, script):
    seen = []
    sentiment = agent("SentimentAgent", script([{"text": "negative"}]))

    def parent_turn(request):
        seen.append(request.tools)
        return call("classify_sentiment", "I was charged twice") if len(seen) == 1 else {"text": "sorry"}

    class SupportAgent(Agent):
        model = script(parent_turn)
        tools = [agent_as_tool(sentiment, name="classify_sentiment", description="Classifies sentiment")]

    run = SupportAgent.ask("Why was I charged twice?")

    assert run.completed and run.response == "sorry"
    (spec,) = seen[0]
    assert (spec.name, spec.description) == ("classify_sentiment", "Classifies sentiment")
    assert tuple(spec.input_schema["required"]) == ("message",)
    (result,) = tool_results(run)
    assert result.status == "success" and result.content[0].text == "negative"


def test_the_call_runs_the_agent_as_a_child_run_derived_from_the_tool_calls_step(config, script):
    sentiment = agent("SentimentAgent", script([{"text": "negative"}]))

    class SupportAgent(Agent):
        model = script([call("classify", "charged twice"), {"text": "done"}])
        tools = [agent_as_tool(sentiment, name="classify")]

    run = SupportAgent.ask("Hi")

    child_id = child_run_id(run.id, "root/turn-0/tool/c1")
    child = config.runtime().store.load_run(child_id)
    assert child.status == "completed" and child.response == "negative"
    assert (child.parent_run_id, child.parent_step_key) == (run.id, "root/turn-0/tool/c1")
    assert json.loads(json.dumps(child.invocation))["message"]["content"][0]["text"] == "charged twice"


def test_the_childs_usage_is_added_to_the_parents_result(config, script):
    usage = {"input_tokens": 100, "output_tokens": 10}
    sentiment = agent("SentimentAgent", script([{"text": "negative", "usage": usage}]))

    class SupportAgent(Agent):
        model = script([{**call("classify", "x"), "usage": usage}, {"text": "done", "usage": usage}])
        tools = [agent_as_tool(sentiment, name="classify")]

    run = SupportAgent.ask("Hi")

    assert run.usage.input_tokens == 300 and run.usage.output_tokens == 30


def test_the_child_receives_the_parents_working_state_as_its_context(config, script):
    seen = {}

    class ReadState(Tool):
        description = "Reads the working state."

        def call(self, input):
            seen.update(self.context.state)
            return "read"

    reader = agent("ReaderAgent", script([{"tool_calls": [{"name": "read_state", "arguments": {}}]}, {"text": "ok"}]))
    reader.tools = (ReadState,)

    class SupportAgent(Agent):
        model = script([call("read", "go"), {"text": "done"}])
        tools = [agent_as_tool(reader, name="read")]

    SupportAgent.ask("Hi", context={"account_id": "acct-7"})

    assert seen == {"account_id": "acct-7"}


def test_without_preserve_context_each_call_starts_with_empty_history(config, script):
    histories = []

    def delegate_turn(request):
        histories.append([message.role for message in request.messages])
        return {"text": f"answer {len(histories)}"}

    helper = agent("HelperAgent", script(delegate_turn))

    class SupportAgent(Agent):
        model = script([call("helper", "one", "c1"), call("helper", "two", "c2"), {"text": "done"}])
        tools = [agent_as_tool(helper, name="helper")]

    SupportAgent.ask("Hi")

    assert histories == [["user"], ["user"]]


def test_preserve_context_carries_the_delegates_conversation_to_the_next_call(config, script):
    histories = []

    def delegate_turn(request):
        histories.append([(message.role, message.text) for message in request.messages])
        return {"text": f"answer {len(histories)}"}

    helper = agent("HelperAgent", script(delegate_turn))

    class SupportAgent(Agent):
        model = script([call("helper", "one", "c1"), call("helper", "two", "c2"), {"text": "done"}])
        tools = [agent_as_tool(helper, name="helper", preserve_context=True)]

    run = SupportAgent.ask("Hi")

    assert run.completed
    assert histories[1] == [("user", "one"), ("assistant", "answer 1"), ("user", "two")]
    assert SupportAgent.tools[0].exclusive  # one conversation: its calls are serialized


def test_a_failed_child_becomes_the_tools_error_result_and_the_parent_continues(config, script):
    broken = agent("BrokenAgent", script([{"error": {"message": "upstream down", "kind": "provider"}}]))

    class SupportAgent(Agent):
        model = script([call("broken", "x"), {"text": "handled"}])
        tools = [agent_as_tool(broken, name="broken")]

    run = SupportAgent.ask("Hi")

    assert run.completed and run.response == "handled"
    (result,) = tool_results(run)
    assert result.status == "error"
    assert "broken did not answer" in result.content[0].text and "upstream down" in result.content[0].text


def test_a_graph_runs_as_a_tool_and_answers_with_its_final_nodes_text(config, script):
    draft = agent("DraftAgent", script([{"text": "a draft"}]))
    polish = agent("PolishAgent", script([{"text": "polished"}]))

    class PipelineGraph(Graph):
        description = "Drafts and polishes"
        nodes = {"draft": draft, "polish": polish}
        start = "draft"
        edges = [edge("draft", "polish")]
        finish = "polish"

    class SupportAgent(Agent):
        model = script([call("write", "write it"), {"text": "done"}])
        tools = [assembly_as_tool(PipelineGraph, name="write")]

    run = SupportAgent.ask("Hi")

    (result,) = tool_results(run)
    assert result.content[0].text == "polished"


def test_a_model_override_runs_the_delegate_on_that_model(config, script):
    helper = agent("HelperAgent", script([{"text": "from its own model"}]))
    other = script([{"text": "from the override"}])

    class SupportAgent(Agent):
        model = script([call("helper", "x"), {"text": "done"}])
        tools = [agent_as_tool(helper, name="helper", model=other)]

    run = SupportAgent.ask("Hi")

    (result,) = tool_results(run)
    assert result.content[0].text == "from the override"
    assert SupportAgent.tools[0].assembly.agent_id == helper.agent_id


def test_a_tools_override_replaces_the_delegates_own_tools(config, script):
    class Own(Tool):
        description = "Its own tool."

        def call(self, input):
            return "own"

    class Given(Tool):
        description = "The given tool."

        def call(self, input):
            return "given"

    helper = agent("HelperAgent", script([{"text": "ok"}]), tools=[Own])

    class SupportAgent(Agent):
        model = script([{"text": "done"}])
        tools = [agent_as_tool(helper, name="helper", tools=[Given])]

    assert SupportAgent.tools[0].assembly.tools == (Given,)
    assert helper.tools == (Own,)


def test_a_tools_override_may_reuse_a_name_of_the_delegates_own_tools_it_replaces(config, script):
    class Own(Tool):
        tool_name = "lookup"
        description = "Its own lookup."

        def call(self, input):
            return "own"

    class Given(Tool):
        tool_name = "lookup"
        description = "The given lookup."

        def call(self, input):
            return "given"

    helper = agent("HelperAgent", script([{"tool_calls": [{"name": "lookup", "arguments": {}}]}, {"text": "ok"}]))
    helper.tools = (Own,)

    class SupportAgent(Agent):
        model = script([call("helper", "x"), {"text": "done"}])
        tools = [agent_as_tool(helper, name="helper", tools=[Given])]

    run = SupportAgent.ask("Hi")

    child = config.runtime().get_run(child_run_id(run.id, "root/turn-0/tool/c1"))
    texts = [block.content[0].text for m in child.result.messages if m.role == "tool" for block in m.content]
    assert texts == ["given"]


def test_a_tools_override_with_two_tools_of_one_name_is_refused_naming_the_fix(script):
    class First(Tool):
        tool_name = "lookup"
        description = "One."

        def call(self, input):
            return "1"

    class Second(Tool):
        tool_name = "lookup"
        description = "Two."

        def call(self, input):
            return "2"

    helper = agent("HelperAgent", script([{"text": "ok"}]))
    with pytest.raises(ConfigurationError, match="override has two tools named 'lookup'.*set tool_name"):

        class SupportAgent(Agent):
            model = "scripted"
            tools = [agent_as_tool(helper, name="helper", tools=[First, Second])]


def test_an_override_for_a_composite_is_refused_naming_where_it_belongs(script):
    class PipelineGraph(Graph):
        description = "Drafts"
        nodes = {"draft": agent("DraftAgent", script([{"text": "a draft"}]))}
        start = "draft"
        edges = []
        finish = "draft"

    with pytest.raises(ConfigurationError, match="a graph has no single model.*Declare it on the graph's members"):
        assembly_as_tool(PipelineGraph, name="write", model="scripted")


def test_agents_and_assemblies_as_tools_declare_one_tool_each(config, script):
    first = agent("FirstAgent", script([{"text": "1"}]), agent_id="first")
    second = agent("SecondAgent", script([{"text": "2"}]), agent_id="second")
    third = agent("ThirdAgent", script([{"text": "3"}]), agent_id="third")

    class SupportAgent(Agent):
        model = script([call("third", "x"), {"text": "done"}])
        tools = [*agents_as_tools(first, second), *assemblies_as_tools(third, preserve_context=True)]

    assert [tool.tool_name for tool in SupportAgent.tools] == ["first", "second", "third"]
    assert [tool.preserve_context for tool in SupportAgent.tools] == [False, False, True]
    (result,) = tool_results(SupportAgent.ask("Hi"))
    assert result.content[0].text == "3"


def test_two_agent_tools_with_one_name_are_refused_naming_the_fix(script):
    helper = agent("HelperAgent", script([{"text": "ok"}]))
    with pytest.raises(ConfigurationError, match="two tools named 'helper'.*set tool_name"):

        class SupportAgent(Agent):
            model = "scripted"
            tools = [agent_as_tool(helper, name="helper"), agent_as_tool(helper, name="helper")]


def test_the_delegates_events_reach_the_parents_stream_as_agent_stream_wrappers(config, script):
    sentiment = agent("SentimentAgent", script([{"text": "negative"}]), agent_id="sentiment")

    class SupportAgent(Agent):
        model = script([call("classify", "charged twice"), {"text": "done"}])
        tools = [agent_as_tool(sentiment, name="classify")]

    stream = SupportAgent.stream_ask("Hi", include_agent_events=True)
    events = list(stream)

    assert stream.completed
    child_id = child_run_id(stream.id, "root/turn-0/tool/c1")
    delegated = [e for e in events if e.type == "agent_stream" and e.data["source"].agent_id == "sentiment"]
    assert delegated and delegated[0].data["event"].type == "invocation_start"
    source = delegated[0].data["source"]
    assert isinstance(source, AgentStreamSource)
    assert (source.operation_id, source.parent_operation_id, source.assembly_path) == (child_id, stream.id, ())
    assert delegated[0].data["input"].text == "charged twice"


def test_the_parents_cancellation_reaches_the_child_and_stops_the_parent(config, script):
    from lg_core.cancellation import CancellationToken

    token = CancellationToken()

    def slow_turn(request):
        token.cancel("stop")
        return {"text": "late", "delay": 5}

    slow = agent("SlowAgent", script(slow_turn))

    class SupportAgent(Agent):
        model = script([call("slow", "x"), {"text": "done"}])
        tools = [agent_as_tool(slow, name="slow")]

    run = SupportAgent.ask("Hi", cancellation_token=token)

    assert run.cancelled
    child = config.runtime().store.load_run(child_run_id(run.id, "root/turn-0/tool/c1"))
    assert child.status == "cancelled"


def test_the_parents_deadline_reaches_the_child_and_ends_the_parent_partial(config, script):
    slow = agent("SlowAgent", script([{"text": "late", "delay": 5}]))

    class SupportAgent(Agent):
        model = script([call("slow", "x"), {"text": "done"}])
        tools = [agent_as_tool(slow, name="slow")]

    run = SupportAgent.ask("Hi", deadline_at=datetime.now(UTC) + timedelta(seconds=1))

    assert run.outcome == "partial"
    child = config.runtime().store.load_run(child_run_id(run.id, "root/turn-0/tool/c1"))
    assert child.status == "partial"


def test_called_outside_a_tool_call_step_the_tool_asks_the_delegate_in_process(config, script):
    helper = agent("HelperAgent", script([{"text": "answered"}]))

    class SupportAgent(Agent):
        model = "scripted"
        tools = [agent_as_tool(helper, name="helper")]

    outcome = SupportAgent.tools[0]().execute({"message": "x"})

    assert outcome.ok and outcome.text == "answered"
    assert not SupportAgent.tools[0]().execute({"topic": "x"}).ok  # the one message input is required


def test_an_overridden_delegate_is_importable_by_its_entrypoint_path_as_a_worker_imports_it():
    delegate = ModuleSupportAgent.tools[0].assembly
    path = f"{delegate.__module__}:{delegate.__qualname__}"

    assert import_entrypoint(path) is delegate
    assert issubclass(delegate, ModuleHelperAgent) and delegate.agent_id == ModuleHelperAgent.agent_id
    assert delegate.model == "scripted:other"


def test_a_message_past_the_bound_is_invalid_input_the_model_reads_and_no_child_runs(config, script):
    sentiment = agent("SentimentAgent", script([{"text": "negative"}]))

    class SupportAgent(Agent):
        model = script([call("classify", "x" * (MAX_MESSAGE_CHARS + 1)), {"text": "too long"}])
        tools = [agent_as_tool(sentiment, name="classify")]

    run = SupportAgent.ask("Hi")

    assert run.completed and run.response == "too long"
    (result,) = tool_results(run)
    assert result.status == "error" and "Invalid input for tool 'classify'" in result.content[0].text
    assert [record.id for record in config.runtime().store.list_runs()] == [run.id]
