"""ModelRequest and ModelCapabilities normalize what they are given, as the spec's pages say."""

from __future__ import annotations

from lg_core import (
    Agent,
    Message,
    ModelCapabilities,
    ModelRequest,
    ModelResponse,
    after_model,
    before_model,
    replace,
)


def test_request_messages_are_normalized_to_message_objects():
    """The spec: "Messages are normalized to Message objects, and required capabilities
    become unique symbols"; a dict or a string must not reach the provider as such."""
    request = ModelRequest(
        messages=[{"role": "user", "content": "Hi"}, "Reply in French."],
        required_capabilities=["tools", "tools", "native_structured_output"],
    )
    assert all(isinstance(message, Message) for message in request.messages)
    assert [m.text for m in request.messages] == ["Hi", "Reply in French."]
    assert isinstance(request.messages, tuple)
    assert request.required_capabilities == ("tools", "native_structured_output")
    extended = request.replace(messages=[*request.messages, {"role": "user", "content": "Thanks"}])
    assert isinstance(extended.messages[-1], Message)


def test_a_before_model_callback_may_append_a_plain_message(config, script):
    target = script(lambda request: {"text": " | ".join(m.text for m in request.messages)})

    class FrenchAgent(Agent):
        model = target

        @before_model
        def ask_for_french(self, payload):
            request = payload["request"]
            messages = [*request.messages, {"role": "user", "content": "Reply in French."}]
            return replace({**payload, "request": request.replace(messages=messages)})

    run = FrenchAgent.ask("Hi")
    assert run.outcome == "completed", run.error
    assert run.response == "Hi | Reply in French."


def test_capabilities_normalize_flags_and_parameter_names():
    """The spec's ModelCapabilities.new "normalizes flags to booleans and stores unique
    parameter-name Strings in a frozen Array"; a single name must not match its substrings."""
    capabilities = ModelCapabilities(tools=1, supported_parameters=["temperature", "temperature", "top_p"])
    assert capabilities.tools is True and capabilities.tool_choice is False
    assert capabilities.supported_parameters == ("temperature", "top_p")
    hash(capabilities)  # a frozen value, usable as a key
    single = ModelCapabilities(supported_parameters="temperature")
    assert single.supported_parameters == ("temperature",)
    assert single.supports_parameter("temperature") and not single.supports_parameter("temp")
    assert ModelCapabilities().supports_parameter("anything")


def test_response_message_is_coerced_to_an_assistant_message():
    """The spec's ModelResponse.new "coerces message to Message"."""
    response = ModelResponse(message="Bonjour")
    assert isinstance(response.message, Message)
    assert (response.message.role, response.text) == ("assistant", "Bonjour")
    mapped = ModelResponse(message={"role": "assistant", "content": "Salut"}, stop_reason="end_turn")
    assert mapped.text == "Salut" and mapped.tool_uses == []


def test_an_after_model_callback_may_replace_the_response_with_plain_text(config, script):
    target = script([{"text": "Hello"}])

    class FrenchAgent(Agent):
        model = target

        @after_model
        def in_french(self, payload):
            return replace({**payload, "response": ModelResponse(message="Bonjour")})

    run = FrenchAgent.ask("Hi")
    assert run.outcome == "completed", run.error
    assert run.response == "Bonjour"
