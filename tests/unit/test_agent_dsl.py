"""The Agent class DSL: declarations are checked when the class is defined."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

import lg_core
from lg_core import (
    DEFAULT_LIMITS,
    AdapterLoadError,
    Agent,
    Configuration,
    ConfigurationError,
    ResultSchema,
    Tool,
    configure,
)
from lg_core.agent import default_agent_id


class LookupTool(Tool):
    description = "Look up."

    def call(self, input):
        return "found"


class RefundTool(Tool):
    description = "Refund."

    def call(self, input):
        return "refunded"


class EscalateTool(Tool):
    description = "Escalate."

    def call(self, input):
        return "escalated"


class BillingTools:
    @classmethod
    def tools(cls, binding):
        return [RefundTool]


STRICT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "category": {"type": "string", "enum": ["billing", "delivery", "other"]},
        "urgent": {"type": "boolean"},
        "summary": {"type": "string", "maxLength": 500},
    },
    "required": ["category", "urgent", "summary"],
    "additionalProperties": False,
}


# -- agent_id ----------------------------------------------------------------------------


def test_default_agent_id_from_class_name():
    class CustomerSupportAgent(Agent):
        pass

    assert CustomerSupportAgent.agent_id == "customer_support"
    assert CustomerSupportAgent.logical_path() == "customer_support"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("CustomerSupportAgent", "customer_support"),
        ("Triage", "triage"),
        ("HTTPProbeAgent", "http_probe"),
        ("Agent", "agent"),
        ("_PrivateAgent", "private"),
        ("__DunderAgent", "dunder"),
        ("RéservationAgent", "reservation"),
    ],
)
def test_default_agent_id_rules(name, expected):
    assert default_agent_id(name) == expected


def test_a_default_agent_id_meets_the_rule_a_declared_one_meets():
    """``_private`` and ``réservation`` were derived, yet refused when declared by hand."""
    private = type("_PrivateAgent", (Agent,), {})
    accented = type("RéservationAgent", (Agent,), {})

    assert private.agent_id == private.assembly_id == "private"
    assert accented.agent_id == "reservation"


@pytest.mark.parametrize("name", ["日本Agent", "X" * 70 + "Agent"])
def test_a_class_name_that_gives_no_valid_agent_id_asks_for_one(name):
    with pytest.raises(
        ConfigurationError, match=r"the agent_id derived from the class name, .* is not valid .*set agent_id = "
    ):
        type(name, (Agent,), {})

    assert type(name, (Agent,), {"agent_id": "named"}).agent_id == "named"


def test_agent_id_override_is_kept_and_subclasses_derive_their_own():
    class SupportAgent(Agent):
        agent_id = "support-v2"

    class BillingSupportAgent(SupportAgent):
        pass

    assert SupportAgent.agent_id == "support-v2"
    assert BillingSupportAgent.agent_id == "billing_support"


def test_an_agent_is_an_assembly_with_its_id_and_kind():
    """Agent < Assembly: Assembly.assembly_id ("derive it from their underscored class name
    without their type suffix") and Assembly.assembly_kind (:agent) were missing, so
    telemetry code ported from the spec failed with AttributeError."""

    class CustomerSupportAgent(Agent):
        pass

    class RenamedAgent(Agent):
        agent_id = "support-v2"

    class ByAssemblyIdAgent(Agent):
        assembly_id = "triage"

    assert (CustomerSupportAgent.assembly_id, CustomerSupportAgent.assembly_kind) == ("customer_support", "agent")
    assert RenamedAgent.assembly_id == "support-v2"
    assert (ByAssemblyIdAgent.agent_id, ByAssemblyIdAgent.assembly_id) == ("triage", "triage")
    with pytest.raises(ConfigurationError, match="assembly_id and agent_id name the same identifier"):

        class BothAgent(Agent):
            agent_id = "one"
            assembly_id = "two"


@pytest.mark.parametrize("bad", ["Support", "has space", "", "-leading", "x" * 65, 5, None])
def test_invalid_agent_id_is_rejected(bad):
    with pytest.raises(ConfigurationError, match=r"agent_id must be 1-64 lowercase letters, digits, '_' or '-'"):

        class BadIdAgent(Agent):
            agent_id = bad


def test_description_must_be_a_string():
    with pytest.raises(ConfigurationError, match="description must be a string"):

        class DescribedAgent(Agent):
            description = ["not", "text"]


# -- tools ----------------------------------------------------------------------------


def test_tools_are_cumulative_across_inheritance_without_duplicates():
    class BaseSupportAgent(Agent):
        tools = [LookupTool]

    class BillingAgent(BaseSupportAgent):
        tools = [BillingTools, LookupTool]

    class SeniorBillingAgent(BillingAgent):
        tools = [EscalateTool, BillingTools]

    class PlainBillingAgent(BillingAgent):
        pass

    assert BaseSupportAgent.tools == (LookupTool,)
    assert BillingAgent.tools == (LookupTool, BillingTools)
    assert SeniorBillingAgent.tools == (LookupTool, BillingTools, EscalateTool)
    assert PlainBillingAgent.tools == (LookupTool, BillingTools)
    assert Agent.tools == ()


def test_tools_from_two_parents_are_merged():
    class LookupAgent(Agent):
        tools = [LookupTool]

    class RefundAgent(Agent):
        tools = [RefundTool]

    class BothAgent(LookupAgent, RefundAgent):
        tools = [EscalateTool]

    assert set(BothAgent.tools) == {LookupTool, RefundTool, EscalateTool}
    assert len(BothAgent.tools) == 3


def test_a_single_tool_class_is_accepted():
    class SingleAgent(Agent):
        tools = LookupTool

    assert SingleAgent.tools == (LookupTool,)


def test_tool_registry_binds_the_declared_tools():
    class RegistryAgent(Agent):
        tools = [LookupTool, BillingTools]

    registry = RegistryAgent().tool_registry(lg_core.Binding(agent="x"))
    assert registry.names == ["lookup", "refund"]


@pytest.mark.parametrize("entry", [LookupTool(), "lookup", 5, None, dict, object()])
def test_non_class_tools_entries_are_rejected(entry):
    with pytest.raises(ConfigurationError, match=r"tools entries must be Tool subclasses or provider classes"):

        class BadToolsAgent(Agent):
            tools = [LookupTool, entry]


def test_a_provider_whose_tools_is_a_plain_method_fails_at_class_definition():
    """The spec's provider implements ``self.tools(binding)``, called on the class; a plain
    method made every run fail with a bare TypeError about a missing 'binding'."""

    class InstanceMethodTools:
        def tools(self, binding):
            return [RefundTool]

    with pytest.raises(ConfigurationError, match=r"InstanceMethodTools.tools must be a classmethod"):

        class PlainProviderAgent(Agent):
            tools = [InstanceMethodTools]


def test_a_provider_whose_tools_takes_no_binding_fails_at_class_definition():
    class ForgotTheBinding:
        @classmethod
        def tools(cls):
            return [RefundTool]

    with pytest.raises(
        ConfigurationError, match=r"ForgotTheBinding.tools must take the binding: .*def tools\(cls, binding\)"
    ):

        class ForgetfulAgent(Agent):
            tools = [ForgotTheBinding]


def test_a_provider_with_a_static_or_inherited_tools_method_is_accepted():
    class StaticTools:
        @staticmethod
        def tools(binding):
            return [RefundTool]

    class InheritedTools(BillingTools):
        pass

    class ProvidersAgent(Agent):
        tools = [StaticTools, InheritedTools]

    assert ProvidersAgent.tools == (StaticTools, InheritedTools)


def test_a_declared_tool_without_a_description_fails_at_class_definition(config):
    """The spec's table: a configuration failure raises before a Run exists; a tool the
    model cannot be told about (no description) is one. Declared on an agent, it was
    accepted, and every ask then returned a failed run from its first model turn."""

    class SilentTool(Tool):
        def call(self, input):
            return "x"

    with pytest.raises(
        ConfigurationError, match=r"SilentAgent\.tools: .*SilentTool \(tool .silent.\) needs a description"
    ):

        class SilentAgent(Agent):
            tools = [LookupTool, SilentTool]


def test_a_string_tools_declaration_is_rejected():
    with pytest.raises(ConfigurationError, match="tools entries must be Tool subclasses"):

        class StringToolsAgent(Agent):
            tools = "lookup"


# -- limits ---------------------------------------------------------------------------


def test_default_limits():
    class DefaultAgent(Agent):
        pass

    assert (
        DefaultAgent.limits
        == DEFAULT_LIMITS
        == {"max_turns": 32, "max_tool_calls": 128, "max_tool_output_tokens": 16_000}
    )


def test_limits_merge_with_parents_and_defaults():
    class ParentAgent(Agent):
        limits = {"max_turns": 5}

    class ChildAgent(ParentAgent):
        limits = {"max_tool_calls": 3}

    class GrandchildAgent(ChildAgent):
        limits = {"max_turns": 7}

    assert ParentAgent.limits == {
        "max_turns": 5,
        "max_tool_calls": 128,
        "max_tool_output_tokens": 16_000,
    }
    assert ChildAgent.limits == {
        "max_turns": 5,
        "max_tool_calls": 3,
        "max_tool_output_tokens": 16_000,
    }
    assert GrandchildAgent.limits == {
        "max_turns": 7,
        "max_tool_calls": 3,
        "max_tool_output_tokens": 16_000,
    }
    assert DEFAULT_LIMITS["max_turns"] == 32  # the defaults are not mutated


def test_unknown_limit_is_rejected_listing_known_ones():
    with pytest.raises(
        ConfigurationError,
        match=r"unknown limit 'max_turn'; known limits: \['max_tool_calls', 'max_tool_output_tokens', 'max_turns'\]",
    ):

        class TypoAgent(Agent):
            limits = {"max_turn": 3}


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", True, None])
def test_non_positive_or_non_integer_limit_is_rejected(bad):
    with pytest.raises(ConfigurationError, match=r"limits\['max_turns'\] must be a positive integer"):

        class BadLimitAgent(Agent):
            limits = {"max_turns": bad}


def test_limits_must_be_a_dict():
    with pytest.raises(ConfigurationError, match="limits must be a dict"):

        class ListLimitsAgent(Agent):
            limits = [("max_turns", 3)]


# -- result_schema ------------------------------------------------------------------------


def test_strict_dict_schema_is_accepted():
    class TriageAgent(Agent):
        result_schema = STRICT

    spec = TriageAgent.result_spec()
    assert isinstance(spec, ResultSchema)
    assert spec.schema == STRICT
    assert (spec.name, spec.description, spec.strategy, spec.model) == (
        "result",
        None,
        "auto",
        None,
    )
    assert spec.tool_name() == "submit_result"


def test_dict_form_with_name_description_and_strategy():
    class TriageAgent(Agent):
        result_schema = {
            "name": "support_triage",
            "description": "Routing decision for one support request",
            "strategy": "tool",
            **STRICT,
        }

    spec = TriageAgent.result_spec()
    assert spec.name == "support_triage"
    assert spec.description == "Routing decision for one support request"
    assert spec.strategy == "tool"
    assert spec.schema == STRICT  # the option keys are not part of the schema


def test_result_schema_instance_is_accepted():
    declared = ResultSchema(schema=STRICT, name="answer", strategy="provider")

    class AnswerAgent(Agent):
        result_schema = declared

    assert AnswerAgent.result_spec() is declared


def test_result_schema_is_inherited_and_can_be_cleared():
    class TriageAgent(Agent):
        result_schema = STRICT

    class SpecialTriageAgent(TriageAgent):
        pass

    class ProseAgent(TriageAgent):
        result_schema = None

    assert SpecialTriageAgent.result_spec() is TriageAgent.result_spec()
    assert ProseAgent.result_spec() is None
    assert Agent.result_spec() is None


def _nested(inner):
    return {
        "type": "object",
        "properties": {"items": {"type": "array", "items": inner}},
        "required": ["items"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        (
            {**STRICT, "additionalProperties": True},
            r"not strict: \$ must set additionalProperties: false",
        ),
        (
            {k: v for k, v in STRICT.items() if k != "additionalProperties"},
            r"\$ must set additionalProperties: false",
        ),
        (
            {**STRICT, "required": ["category", "urgent"]},
            r"\$ must list every property in required \(missing \['summary'\]\)",
        ),
        ({"type": "array", "items": {"type": "string"}}, "the top-level type must be 'object'"),
        (
            {"properties": {}, "required": [], "additionalProperties": False},
            "the top-level type must be 'object'",
        ),
        (
            {"schema": STRICT, "name": "triage"},  # the spec's result_schema(schema, name:) written as one dict
            r"the top-level type must be 'object'; the schema is given flat, its own keys at the top level",
        ),
        (
            {
                **STRICT,
                "properties": {
                    **STRICT["properties"],
                    "summary": {"type": "string", "oneOf": [{"minLength": 1}]},
                },
            },
            r"\$\.summary uses unsupported keywords \['oneOf'\]",
        ),
        (
            {**STRICT, "patternProperties": {"x": {}}},
            r"\$ uses unsupported keywords \['patternProperties'\]",
        ),
        (
            _nested({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}),
            r"\$\.items\[\] must set additionalProperties",
        ),
        (
            _nested(
                {
                    "type": "object",
                    "properties": {"a": {"type": "string"}},
                    "additionalProperties": False,
                }
            ),
            r"\$\.items\[\] must list every property",
        ),
        (
            {**STRICT, "strategy": "magic"},
            r"strategy must be one of \('auto', 'provider', 'tool'\), got 'magic'",
        ),
        ({**STRICT, "name": "has space"}, "name must be 1-64 letters"),
        (
            {**STRICT, "properties": {**STRICT["properties"], "urgent": {"type": "bool"}}},
            "is not valid JSON Schema",
        ),
    ],
)
def test_non_strict_or_invalid_result_schemas_fail_at_class_definition(schema, match):
    with pytest.raises(ConfigurationError, match=match) as info:

        class BadResultAgent(Agent):
            result_schema = schema

    assert "BadResultAgent.result_schema" in str(info.value)


@pytest.mark.parametrize("bad", [5, "schema", [STRICT], BaseModel.__init__])
def test_result_schema_of_the_wrong_type_is_rejected(bad):
    with pytest.raises(ConfigurationError, match="result_schema must be a dict, a ResultSchema or a Pydantic model"):

        class WrongTypeAgent(Agent):
            result_schema = bad


class SupportTriage(BaseModel):
    """Routing decision for one support request."""

    model_config = ConfigDict(extra="forbid")
    category: str
    urgent: bool
    tags: list[str]


def test_strict_pydantic_model_is_accepted():
    class TriageAgent(Agent):
        result_schema = SupportTriage

    spec = TriageAgent.result_spec()
    assert spec.model is SupportTriage
    assert spec.name == "support_triage"
    assert spec.description == "Routing decision for one support request."
    assert spec.schema["additionalProperties"] is False
    assert sorted(spec.schema["required"]) == ["category", "tags", "urgent"]
    assert isinstance(spec.output({"category": "billing", "urgent": True, "tags": []}), SupportTriage)
    assert spec.validate({"category": "billing", "urgent": "yes", "tags": []}) == [
        "urgent: 'yes' is not of type 'boolean'"
    ]


def test_nested_strict_pydantic_models_are_accepted():
    class Step(BaseModel):
        model_config = ConfigDict(extra="forbid")
        name: str

    class Plan(BaseModel):
        model_config = ConfigDict(extra="forbid")
        steps: list[Step]

    class PlanAgent(Agent):
        result_schema = Plan

    assert "$defs" in PlanAgent.result_spec().schema


class LooseTriage(BaseModel):
    category: str
    urgent: bool = False


class NestedLoose(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inner: LooseTriage


@pytest.mark.parametrize(
    ("model", "problem"),
    [
        (LooseTriage, r"\$ must set additionalProperties: false"),
        (NestedLoose, r"\$defs\.LooseTriage must set additionalProperties: false"),
    ],
)
def test_non_strict_pydantic_model_is_rejected_with_the_hint(model, problem):
    with pytest.raises(ConfigurationError, match=problem) as info:

        class LooseAgent(Agent):
            result_schema = model

    assert "set model_config = ConfigDict(extra='forbid') and give every field no default" in str(info.value)


def test_pydantic_model_with_a_default_is_rejected():
    class Defaulted(BaseModel):
        model_config = ConfigDict(extra="forbid")
        category: str
        urgent: bool = False

    with pytest.raises(ConfigurationError, match=r"missing \['urgent'\].*give every field no default"):

        class DefaultedAgent(Agent):
            result_schema = Defaulted


def test_dict_schema_rejection_has_no_pydantic_hint():
    with pytest.raises(ConfigurationError) as info:

        class LooseDictAgent(Agent):
            result_schema = {**STRICT, "additionalProperties": True}

    assert "Pydantic" not in str(info.value)


# -- model declarations ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "good",
    [
        "fast",
        "scripted:demo",
        "openrouter:openai/gpt-5.6-luna",
        {"provider": "scripted", "model": "x", "temperature": 0},
    ],
)
def test_valid_model_declarations(good):
    class ModelAgent(Agent):
        model = good

    assert ModelAgent.model == good


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        ":model",
        "connection:",
        5,
        ["scripted:x"],
        {"provider": "scripted"},
        {"model": "x"},
        {"provider": "primary:openai", "model": "x"},  # would select connection 'primary'
        {"provider": "scripted", "model": 5},
    ],
)
def test_invalid_model_declarations_fail_at_class_definition(bad):
    with pytest.raises(ConfigurationError, match=r"model must be a role name, a 'connection:model-id' target or"):

        class BadModelAgent(Agent):
            model = bad


def test_select_model_without_classmethod_fails_at_class_definition():
    """Defined as a plain method it failed every ask with a raw TypeError about a
    missing argument; the declaration error is reported where it was made."""
    with pytest.raises(ConfigurationError, match=r"select_model must be a classmethod"):

        class PlainSelectorAgent(Agent):
            def select_model(self, invocation):
                return "scripted:x"


def test_a_model_classmethod_points_to_select_model():
    with pytest.raises(ConfigurationError, match=r"define `@classmethod def select_model"):

        class MethodModelAgent(Agent):
            @classmethod
            def model(cls, invocation):
                return "scripted:x"


def test_model_is_inherited():
    class ParentAgent(Agent):
        model = "scripted:parent"

    class ChildAgent(ParentAgent):
        pass

    assert ChildAgent.model == "scripted:parent"


# -- model selection at ask() ------------------------------------------------------------------


def test_direct_target(config, script):
    target = script([{"text": "direct"}])

    class DirectAgent(Agent):
        model = target

    assert DirectAgent.ask("hi").response == "direct"


def test_select_model_chooses_per_invocation(config, script):
    fast = script([{"text": "fast model"}])
    careful = script([{"text": "careful model"}])
    seen = []

    class RoutingAgent(Agent):
        model = fast

        @classmethod
        def select_model(cls, invocation):
            seen.append(invocation.context.get("tier"))
            return careful if invocation.context.get("tier") == "premium" else cls.model

    assert RoutingAgent.ask("hi", context={"tier": "premium"}).response == "careful model"
    assert RoutingAgent.ask("hi", context={"tier": "free"}).response == "fast model"
    assert seen == ["premium", "free"]


def test_role_selection_through_configure(config, script):
    target = script(lambda request: {"text": json.dumps({"temperature": request.settings.get("temperature")})})
    configure(models={"triage": {"target": target, "settings": {"temperature": 0.25}}})

    class RoleAgent(Agent):
        model = "triage"

    assert json.loads(RoleAgent.ask("hi").response) == {"temperature": 0.25}


def test_inline_mapping_selection_carries_settings(config, script):
    target = script(lambda request: {"text": json.dumps({"top_p": request.settings.get("top_p")})})
    name = target.split(":", 1)[1]

    class InlineAgent(Agent):
        model = {"provider": "scripted", "model": name, "top_p": 0.5}

    assert json.loads(InlineAgent.ask("hi").response) == {"top_p": 0.5}


def test_default_model_is_used_when_the_agent_declares_none(config, script):
    target = script([{"text": "default"}])
    configure(default_model=target)

    class UnmodeledAgent(Agent):
        pass

    assert UnmodeledAgent.ask("hi").response == "default"


@pytest.mark.parametrize(
    ("selection", "error", "match"),
    [
        (
            "nonexistent_role",
            ConfigurationError,
            r"unknown model role 'nonexistent_role' \(configured roles: known\); use a 'connection:model-id'",
        ),
        (
            "nowhere:model-x",
            ConfigurationError,
            r"no provider connection named 'nowhere' \(known: .*scripted.*\); add it with configure",
        ),
        ("broken:model-x", AdapterLoadError, "uses unknown adapter 'does-not-exist'"),
    ],
)
def test_unresolvable_models_raise_from_ask_before_a_run_exists(config, script, selection, error, match):
    target = script([{"text": "unused"}])
    configure(
        models={"known": {"target": target}},
        providers={"broken": {"adapter": "does-not-exist"}},
    )

    class UnresolvableAgent(Agent):
        model = selection

    with pytest.raises(error, match=match):
        UnresolvableAgent.ask("hi")
    with pytest.raises(error, match=match):
        UnresolvableAgent.stream_ask("hi")
    assert lg_core.list_runs() == []


def test_a_role_without_target_fails_when_the_runtime_is_built(config, script):
    configure(models={"no_target": {"settings": {}}})

    class RoleAgent(Agent):
        model = "no_target"

    with pytest.raises(ConfigurationError, match="model role 'no_target' needs a 'target'"):
        RoleAgent.ask("hi")
    config.close()
    configure(models={})
    assert lg_core.list_runs() == []


def test_no_model_anywhere_raises_before_a_run_exists(config, monkeypatch):
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)

    class UnmodeledAgent(Agent):
        pass

    with pytest.raises(
        ConfigurationError, match=r"no model selected: set `model = \"connection:model-id\"`.*or set OPENROUTER_API_KEY"
    ):
        UnmodeledAgent.ask("hi")
    assert lg_core.list_runs() == []


def test_with_nothing_configured_an_openrouter_key_selects_the_conventional_default(config, monkeypatch):
    """The spec's ModelResolver: "With neither [providers nor profiles], conventional credentials
    select GPT-5.6 Luna"."""
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test")

    model = config.runtime().resolver.resolve(None)

    assert model.target == "openrouter:openai/gpt-5.6-luna"
    assert type(model.provider).__name__ == "OpenRouterProvider"


def test_a_configured_connection_or_role_turns_the_conventional_default_off(monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test")
    for settings in (
        {"providers": {"local": {"adapter": "scripted"}}},
        {"models": {"support": {"target": "scripted:x"}}},
    ):
        configuration = lg_core.Configuration(**settings)
        try:
            with pytest.raises(ConfigurationError, match="no model selected") as caught:
                configuration.runtime().resolver.resolve(None)
            assert "OPENROUTER_API_KEY" not in str(caught.value)
        finally:
            configuration.close()


def test_select_model_returning_garbage_raises_before_a_run_exists(config):
    class GarbageSelectionAgent(Agent):
        @classmethod
        def select_model(cls, invocation):
            return 42

    with pytest.raises(ConfigurationError, match="a model selection must be a role, a target or a mapping, got 42"):
        GarbageSelectionAgent.ask("hi")
    assert lg_core.list_runs() == []


def test_a_standalone_instance_runs_on_its_own_runtime(config, script):
    """The spec's ``CustomerSupportAgent.new(runtime: runtime).ask(...)``: a standalone
    instance creates its Runs on the runtime it was built with, not the current one."""
    target = script([{"text": "isolated"}] * 4)

    class IsolatedAgent(Agent):
        model = target

    isolated = Configuration()
    try:
        runtime = isolated.runtime()
        agent = IsolatedAgent(runtime=runtime)
        run = agent.ask("hi")
        assert run.runtime is runtime and run.response == "isolated"
        assert agent.stream_ask("hi").runtime is runtime
        assert asyncio.run(agent.ask_async("hi")).runtime is runtime
        assert [record.id for record in lg_core.list_runs()] == []  # none in the current store
        assert agent.ask("hi", runtime=config.runtime()).runtime is config.runtime()  # an explicit one wins
    finally:
        isolated.close()
    assert IsolatedAgent.ask("hi").runtime is config.runtime()


# -- system prompt ------------------------------------------------------------------------------


def test_system_prompt_string_or_method():
    class StaticAgent(Agent):
        system_prompt = "Be brief."

    class DynamicAgent(Agent):
        def system_prompt(self):
            return f"You are {type(self).agent_id}."

    assert StaticAgent().render_system_prompt() == "Be brief."
    assert DynamicAgent().render_system_prompt() == "You are dynamic."
    assert Agent().render_system_prompt() is None


def test_a_system_prompt_method_returning_none_means_no_system_prompt():
    """The spec allows nil; ``str(None)`` sent the model the prompt 'None'."""

    class TenantAgent(Agent):
        def system_prompt(self):
            return None

    assert TenantAgent().render_system_prompt() is None


@pytest.mark.parametrize("returned", [42, b"bytes", ["a list"]])
def test_a_system_prompt_method_returning_a_non_string_is_a_configuration_error(returned):
    class OddPromptAgent(Agent):
        def system_prompt(self):
            return returned

    with pytest.raises(
        ConfigurationError,
        match=rf"OddPromptAgent\.system_prompt returned {type(returned).__name__}; it must return a string, or None",
    ):
        OddPromptAgent().render_system_prompt()


def test_an_async_system_prompt_method_is_awaited():
    """Its coroutine's repr was sent to the model as the system prompt."""

    class AsyncPromptAgent(Agent):
        async def system_prompt(self):
            await asyncio.sleep(0)
            return f"Be nice, {type(self).agent_id}."

    class AsyncNoPromptAgent(Agent):
        async def system_prompt(self):
            return None

    assert AsyncPromptAgent().render_system_prompt() == "Be nice, async_prompt."
    assert AsyncNoPromptAgent().render_system_prompt() is None


def test_staticmethod_and_classmethod_system_prompts_are_called_with_what_they_take():
    """A staticmethod passed the class check, then every run failed with a TypeError."""

    class StaticPromptAgent(Agent):
        @staticmethod
        def system_prompt():
            return "static"

    class ClassPromptAgent(Agent):
        @classmethod
        def system_prompt(cls):
            return f"for {cls.agent_id}"

    class InheritingAgent(ClassPromptAgent):
        pass

    assert StaticPromptAgent().render_system_prompt() == "static"
    assert ClassPromptAgent().render_system_prompt() == "for class_prompt"
    assert InheritingAgent().render_system_prompt() == "for inheriting"


@pytest.mark.parametrize("form", ["function", "staticmethod", "classmethod"])
def test_a_system_prompt_method_taking_the_wrong_arguments_fails_at_class_definition(form):
    def needs_a_tenant(self, tenant):
        return tenant

    declared = {
        "function": needs_a_tenant,
        "staticmethod": staticmethod(needs_a_tenant),
        "classmethod": classmethod(needs_a_tenant),
    }

    with pytest.raises(
        ConfigurationError,
        match=r"system_prompt\(self, tenant\) takes the wrong arguments; it must be a string or a method",
    ):
        type("TenantPromptAgent", (Agent,), {"system_prompt": declared[form]})


def test_a_property_system_prompt_is_refused_naming_the_accepted_forms():
    with pytest.raises(
        ConfigurationError, match=r"def system_prompt\(self\) -> str \| None.*@staticmethod.*@classmethod.*got property"
    ):

        class PropertyPromptAgent(Agent):
            @property
            def system_prompt(self):
                return "p"


@pytest.mark.parametrize("bad", [42, b"Be brief.", ["Be brief."]])
def test_system_prompt_of_the_wrong_type_fails_at_class_definition(config, bad):
    """A declaration error, like a bad limit or schema: raised when the class is defined,
    never a Run that fails later."""
    with pytest.raises(ConfigurationError, match="system_prompt must be a string or a method returning one"):

        class NumberPromptAgent(Agent):
            model = "scripted:unused"
            system_prompt = bad

    assert lg_core.list_runs() == []


# -- declarations nothing would act on -------------------------------------------------------------


UNSUPPORTED = [
    ("skills", {"paths": ["skills"]}, "skills"),
    ("manage_context", {"compression_threshold": 0.75}, "context management"),
    ("system_template", "support/system", "prompt templates"),
    ("prompt_local", {"tone": "calm"}, "prompt templates"),
]


@pytest.mark.parametrize(("name", "value", "noun"), UNSUPPORTED, ids=[row[0] for row in UNSUPPORTED])
def test_a_spec_declaration_that_is_not_supported_yet_fails_at_class_definition(name, value, noun):
    with pytest.raises(ConfigurationError, match=f"SupportAgent declares {name} .*{noun} are not supported yet"):
        type("SupportAgent", (Agent,), {name: value})


@pytest.mark.parametrize("name", ["agent_as_tool", "agents_as_tools", "assembly_as_tool", "assemblies_as_tools"])
def test_a_tool_declaration_made_as_a_class_attribute_fails_naming_the_tools_list(name):
    with pytest.raises(ConfigurationError, match=rf"declares {name} .*as a class attribute.*tools = \[{name}\("):
        type("SupportAgent", (Agent,), {name: object})


def test_an_unsupported_declaration_in_a_mixin_fails_too():
    class Skilled:
        skills = object

    with pytest.raises(ConfigurationError, match=r"declares skills \(in .*Skilled\), but skills are not supported yet"):
        type("SupportAgent", (Skilled, Agent), {})


def test_a_singular_subagent_attribute_is_refused_naming_the_subagents_list():
    with pytest.raises(ConfigurationError, match=r"subagents = \[subagent\("):
        type("SupportAgent", (Agent,), {"subagent": object})


@pytest.mark.parametrize(
    ("declaration", "named"),
    [
        ({"limitz": {}}, "unknown option 'limitz'"),
        ({"engine": "ruby"}, "option 'engine' must be 'python'"),
        ({"limits": {"wall_secs": 5}}, "option 'limits': unknown code-mode limit 'wall_secs'"),
        ({"limits": {"wall_seconds": 0}}, "code-mode limit 'wall_seconds' must be a positive integer"),
        ({"except": [3]}, "option 'except' must be a list of tool names"),
        ({"sandbox": "no-such-backend"}, "option 'sandbox': no sandbox backend named 'no-such-backend'"),
        ("yes", "code_mode must be True or a dict"),
    ],
)
def test_a_bad_code_mode_declaration_fails_at_class_definition_naming_the_option(declaration, named):
    with pytest.raises(ConfigurationError, match=re.escape(named)):
        type("SupportAgent", (Agent,), {"code_mode": declaration})


def test_code_mode_is_declared_as_true_or_with_options_and_inherited():
    base = type("SupportAgent", (Agent,), {"code_mode": {"limits": {"wall_seconds": 900}, "except": ["confirm"]}})
    options = base.code_mode_options()
    assert options.limits["wall_seconds"] == 900 and options.limits["programs"] == 16
    assert options.except_ == frozenset({"confirm"})
    assert type("Child", (base,), {}).code_mode_options() == options
    assert type("Plain", (Agent,), {"code_mode": True}).code_mode_options().engine == "python"
    assert type("Off", (Agent,), {}).code_mode_options() is None


def test_a_code_mode_agent_refuses_a_tool_named_like_a_control():
    class Exec(Tool):
        tool_name = "exec"
        description = "runs things"

        def call(self, input):
            return "ran"

    with pytest.raises(ConfigurationError, match="'exec'.*a code-mode control"):
        type("SupportAgent", (Agent,), {"code_mode": True, "tools": [Exec]})


@pytest.mark.parametrize(("name", "value"), [("sandbox", {"backend": "native"}), ("workspace", {"root": "/srv"})])
def test_a_sandbox_or_workspace_class_attribute_fails_because_they_come_from_the_settings(name, value):
    with pytest.raises(
        ConfigurationError, match=f"SupportAgent declares {name} .*built from the {name} setting .*configure"
    ):
        type("SupportAgent", (Agent,), {name: value})


def test_a_sandbox_class_attribute_in_a_mixin_fails_too():
    class Sandboxed:
        sandbox = {"backend": "native"}

    with pytest.raises(ConfigurationError, match=r"declares sandbox \(in .*Sandboxed\), but an agent's sandbox"):
        type("SupportAgent", (Sandboxed, Agent), {})


def test_a_method_named_like_a_callback_but_not_declared_fails_at_class_definition():
    def before_model(self, payload):
        return None

    with pytest.raises(
        ConfigurationError, match=r"SupportAgent.before_model is not declared as a callback.*@lg_core.before_model"
    ):
        type("SupportAgent", (Agent,), {"before_model": before_model})


def test_a_declared_callback_named_after_its_kind_and_its_override_run(config):
    seen = []
    target = "scripted:dsl-callback-names"
    lg_core.providers.scripted.register("dsl-callback-names", [{"text": "Hi."}, {"text": "Hi."}])
    try:

        class Parent(Agent):
            model = target

            @lg_core.before_model
            def before_model(self, payload):
                seen.append("parent")

        class Child(Parent):
            def before_model(self, payload):  # overrides the declared callback: still one
                seen.append("child")

        assert Parent.ask("Hi").completed and Child.ask("Hi").completed
    finally:
        lg_core.providers.scripted.unregister("dsl-callback-names")
    assert seen == ["parent", "child"]
