"""The openrouter adapter's pure parts: request bodies, reasoning details, capabilities and error advice."""

from __future__ import annotations

import json

import pytest

from lg_core import ConfigurationError, HTTPError
from lg_core.content import Reasoning, Text, ToolUse
from lg_core.messages import Message
from lg_core.models.request import ModelCapabilities, ModelRequest
from lg_core.providers._http.errors import ErrorReply
from lg_core.providers.openai._errors import provider_error
from lg_core.providers.openai._request import build_body as openai_body
from lg_core.providers.openrouter._connection import capabilities_option
from lg_core.providers.openrouter._errors import STATUS_HINTS
from lg_core.providers.openrouter._request import build_body
from lg_core.providers.openrouter._stream import OpenRouterChunkReader, ReasoningDetails

SCHEMA = {"name": "triage", "schema": {"type": "object"}}
SIGNED = {
    "type": "reasoning.text",
    "text": "Check the order.",
    "signature": "sig-1",
    "format": "anthropic-claude-v1",
    "index": 0,
}


def request(**fields):
    return ModelRequest(messages=fields.pop("messages", (Message(role="user", content="Hi"),)), **fields)


def body(routing=None, capabilities=None, **fields):
    return build_body(
        request(**fields), "anthropic/claude-sonnet-4.5", capabilities or ModelCapabilities.permissive(), routing or {}
    )


# -- reasoning details ---------------------------------------------------------------------------------


def test_text_fragments_of_one_block_become_one_detail_with_the_late_signature():
    details = ReasoningDetails()
    details.add([{"type": "reasoning.text", "text": "Check ", "signature": None, "index": 0}])
    details.add([{"type": "reasoning.text", "text": "the order.", "index": 0}])
    details.add([{"type": "reasoning.text", "text": "", "signature": "sig-1", "index": 0}])

    assert details.collected() == [
        {"type": "reasoning.text", "text": "Check the order.", "signature": "sig-1", "index": 0}
    ]


def test_separate_blocks_and_encrypted_reasoning_stay_separate():
    encrypted = {"type": "reasoning.encrypted", "data": "EqQB", "index": 1}
    details = ReasoningDetails()
    details.add([{"type": "reasoning.text", "text": "First.", "index": 0}])
    details.add([{"type": "reasoning.text", "text": "Second.", "index": 1}, encrypted])
    details.add([{"type": "reasoning.summary", "summary": "In short.", "index": 2}, "not a detail"])
    details.add({"type": "reasoning.text"})  # not a list: ignored

    assert [d.get("text") or d.get("summary") or d.get("data") for d in details.collected()] == [
        "First.",
        "Second.",
        "EqQB",
        "In short.",
    ]


def test_a_detail_no_fragment_continued_is_kept_as_it_came():
    details = ReasoningDetails()
    details.add([{"type": "reasoning.text", "text": None, "index": 0}])

    assert details.collected() == [{"type": "reasoning.text", "text": None, "index": 0}]


def test_a_response_with_only_encrypted_reasoning_still_keeps_it():
    reader = OpenRouterChunkReader("openrouter:google/gemini-3-pro", sequence=0)
    encrypted = {"type": "reasoning.encrypted", "data": "EqQB", "format": "google-gemini-v1", "index": 0}
    list(reader.feed({"choices": [{"index": 0, "delta": {"reasoning_details": [encrypted]}, "finish_reason": None}]}))
    list(reader.feed({"choices": [{"index": 0, "delta": {"content": "Done."}, "finish_reason": "stop"}]}))

    message = list(reader.finish())[-1].data["response"].message

    assert message.content[0] == Reasoning(text="", details=(encrypted,))
    assert message.text == "Done."


def test_reasoning_given_only_as_details_is_still_the_blocks_text():
    reader = OpenRouterChunkReader("openrouter:openai/gpt-5.6-luna", sequence=0)
    summary = [{"type": "reasoning.summary", "summary": "Greet back.", "index": 0}]
    list(reader.feed({"choices": [{"index": 0, "delta": {"reasoning_details": summary}, "finish_reason": None}]}))
    list(reader.feed({"choices": [{"index": 0, "delta": {"content": "Hi!"}, "finish_reason": "stop"}]}))

    [reasoning, _] = list(reader.finish())[-1].data["response"].message.content

    assert reasoning == Reasoning(text="Greet back.", details=tuple(summary))


def test_reasoning_details_go_back_on_the_assistant_message_and_only_through_openrouter():
    assistant = Message(
        role="assistant",
        content=[
            Reasoning(text="Check the order.", details=(SIGNED,)),
            Text(text="Looking."),
            ToolUse(id="c1", name="order_status", input={"order_id": "A-17"}),
        ],
    )
    plain = Message(role="assistant", content=[Reasoning(text="No details."), Text(text="Hi.")])
    messages = (
        Message(role="user", content="Where is A-17?"),
        assistant,
        Message(role="user", content="Thanks"),
        plain,
    )

    wire = body(messages=messages)["messages"]

    assert wire[1]["reasoning_details"] == [SIGNED]
    assert "reasoning_details" not in wire[3]
    assert (
        "reasoning_details"
        not in openai_body(request(messages=messages), "m", ModelCapabilities.permissive())["messages"][1]
    )


def test_another_adapters_reasoning_details_do_not_go_to_openrouter():
    gemini = Reasoning(details=({"type": "gemini.thought_signature", "part": "text", "signature": "c2ln"},))
    assistant = Message(
        role="assistant", content=[gemini, Reasoning(text="Check.", details=(SIGNED,)), Text(text="Looking.")]
    )
    messages = (Message(role="user", content="Where is A-17?"), assistant, Message(role="user", content="Thanks"))

    wire = body(messages=messages)["messages"]

    assert wire[1]["reasoning_details"] == [SIGNED]


# -- routing and capability routing ----------------------------------------------------------------------


def test_routing_preferences_merge_with_the_connection_winning():
    wire = body(
        routing={"data_collection": "deny"}, settings={"provider": {"data_collection": "allow", "sort": "price"}}
    )

    assert wire["provider"] == {"data_collection": "deny", "sort": "price"}


def test_structured_output_requires_parameters_unless_the_preferences_say_otherwise():
    assert body(output_schema=SCHEMA)["provider"] == {"require_parameters": True}
    assert body(output_schema=SCHEMA, routing={"require_parameters": False})["provider"] == {
        "require_parameters": False
    }
    assert body(output_schema=SCHEMA, settings={"provider": {"require_parameters": False}})["provider"] == {
        "require_parameters": False
    }
    assert body(required_capabilities=("vision",))["provider"] == {"require_parameters": True}
    no_native = ModelCapabilities(tools=True, tool_choice=True)
    assert "provider" not in body(output_schema=SCHEMA, capabilities=no_native)


def test_only_model_parameters_the_model_lacks_are_left_out_and_only_when_routing_requires_them():
    known = ModelCapabilities(native_structured_output=True, supported_parameters=("max_tokens", "structured_outputs"))
    settings = {"temperature": 0.2, "max_tokens": 100, "models": ["openai/gpt-5-mini"], "user": "u-1", "transforms": []}

    wire = body(output_schema=SCHEMA, capabilities=known, settings=settings)

    assert {key: wire.get(key) for key in settings} == {
        "temperature": None,
        "max_tokens": 100,
        "models": ["openai/gpt-5-mini"],
        "user": "u-1",
        "transforms": [],
    }
    assert body(capabilities=known, settings=settings)["temperature"] == 0.2  # nothing required: sent as given


def test_shorthand_settings_count_as_the_parameter_they_stand_for():
    known = ModelCapabilities(
        native_structured_output=True, supported_parameters=("reasoning", "max_tokens", "structured_outputs")
    )
    settings = {"reasoning_effort": "high", "max_completion_tokens": 500, "top_k": 40}

    wire = body(output_schema=SCHEMA, capabilities=known, settings=settings)

    assert (wire["reasoning_effort"], wire["max_completion_tokens"], "top_k" in wire) == ("high", 500, False)


def test_a_provider_setting_that_is_not_a_mapping_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="model setting 'provider' must be a mapping"):
        body(settings={"provider": "anthropic"})


def test_a_reserved_setting_names_the_openrouter_adapter():
    with pytest.raises(
        ConfigurationError, match="model setting 'stream' cannot be set: the openrouter adapter builds it"
    ):
        body(settings={"stream": False})


@pytest.mark.parametrize(
    ("parameters", "flags"),
    [
        (["tools", "tool_choice", "structured_outputs", "response_format", "temperature"], (True, True, True)),
        (["tools", "temperature"], (True, False, False)),
        (["response_format", "max_tokens"], (False, False, False)),  # json mode is not a schema
    ],
)
def test_capabilities_are_read_from_supported_parameters(parameters, flags):
    capabilities = capabilities_option("openrouter", {"supported_parameters": parameters})

    assert (capabilities.tools, capabilities.tool_choice, capabilities.native_structured_output) == flags
    assert capabilities.supported_parameters == tuple(parameters)
    assert capabilities.known


def test_flags_given_beside_supported_parameters_win():
    capabilities = capabilities_option(
        "openrouter", {"supported_parameters": ["tools"], "native_structured_output": True}
    )

    assert capabilities.native_structured_output and capabilities.tools and not capabilities.tool_choice


# -- error advice ------------------------------------------------------------------------------------------


def openrouter_error(status, message, **metadata):
    error = {"code": status, "message": message, **({"metadata": metadata} if metadata else {})}
    return provider_error(ErrorReply(status, json.dumps({"error": error})), endpoint="here", hints=STATUS_HINTS)


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (402, False),
        (403, False),
        (404, False),
        (408, True),
        (429, True),
        (502, True),
        (503, True),
    ],
)
def test_openrouter_statuses_retry_as_documented(status, retryable):
    error = openrouter_error(status, "nope")

    assert type(error) is HTTPError
    assert (error.status, error.retryable) == (status, retryable)
    assert f"({status})" not in str(error)  # OpenRouter's code repeats the status: not said twice


def test_out_of_credits_says_what_to_do():
    message = str(openrouter_error(402, "Insufficient credits"))

    assert message.startswith("here answered 402 Payment Required: Insufficient credits. ")
    assert "retrying will not help" in message and "https://openrouter.ai/credits" in message


def test_the_openai_adapter_gives_no_openrouter_advice():
    error = provider_error(
        ErrorReply(402, '{"error": {"code": 402, "message": "Insufficient credits"}}'), endpoint="here"
    )

    assert str(error) == "here answered 402 Payment Required: Insufficient credits."


def test_an_upstream_error_quotes_its_provider_and_a_bounded_raw_error():
    error = openrouter_error(502, "Provider returned error", provider_name="Anthropic", raw="x" * 5000)

    assert "(upstream provider Anthropic: xxx" in str(error)
    assert len(str(error)) < 900
