"""The error hierarchy: names, shape, pickling and control-flow errors."""

from __future__ import annotations

import copy
import pickle
import re

import pytest

import lg_core
from lg_core import errors
from lg_core.errors import CONTROL_FLOW_ERRORS

# child -> direct parent, exactly the tree in lg_core/errors.py's docstring
EXPECTED_PARENTS = {
    "Error": "Exception",
    "ConfigurationError": "Error",
    "AdapterLoadError": "ConfigurationError",
    "CredentialError": "ConfigurationError",
    "SandboxConfigurationError": "ConfigurationError",
    "CapabilityError": "SandboxConfigurationError",
    "DependencyError": "SandboxConfigurationError",
    "PolicyError": "SandboxConfigurationError",
    "UnsupportedPlatformError": "SandboxConfigurationError",
    "InvocationError": "Error",
    "AgentInterjectionError": "InvocationError",
    "UnsupportedInputError": "InvocationError",
    "ProviderError": "Error",
    "ContextWindowOverflowError": "ProviderError",
    "HTTPError": "ProviderError",
    "ProtocolError": "ProviderError",
    "MalformedToolCallError": "ProtocolError",
    "OutputLimitError": "ProtocolError",
    "StructuredResultError": "ProtocolError",
    "ToolLoopError": "ProtocolError",
    "PromptTemplateError": "Error",
    "InvalidPromptTemplateError": "PromptTemplateError",
    "MissingPromptLocalError": "PromptTemplateError",
    "MissingPromptTemplateError": "PromptTemplateError",
    "AssemblyError": "Error",
    "AssemblyLimitError": "AssemblyError",
    "AssemblyRoutingError": "AssemblyError",
    "AssemblyStepTimeoutError": "AssemblyError",
    "ReplayDivergenceError": "Error",
    "RunNotFoundError": "Error",
    "RunStateError": "Error",
    "SessionActorError": "Error",
    "StoreUnavailableError": "Error",
    "CleanupError": "Error",
    "SandboxLimitError": "Error",
    "ToolError": "Error",
    "AbstractMethodError": "Error",
    "CancelledError": "BaseException",
    "DeadlineExceededError": "BaseException",
}
BUILTINS = {"Exception": Exception, "BaseException": BaseException}
DOMAIN_ERRORS = sorted(name for name in EXPECTED_PARENTS if name not in ("CancelledError", "DeadlineExceededError"))


def _resolve(name):
    return BUILTINS.get(name) or getattr(errors, name)


@pytest.mark.parametrize(("name", "parent"), sorted(EXPECTED_PARENTS.items()))
def test_each_error_has_its_documented_parent(name, parent):
    cls = getattr(errors, name)
    assert cls.__bases__ == (_resolve(parent),)
    assert getattr(lg_core, name) is cls


def test_every_exported_error_is_in_the_tree():
    assert set(errors.__all__) == set(EXPECTED_PARENTS)


def _docstring_tree():
    """(child, parent) pairs parsed from the tree drawing in the module docstring."""
    pairs, stack = [], []
    for line in errors.__doc__.splitlines():
        match = re.match(r"^([ │├└─]*)([A-Za-z]*(?:Error|Exception))\b", line)
        if not match or len(match.group(1)) < 4:
            continue
        depth = (len(match.group(1)) - 4) // 4
        del stack[depth:]
        if stack:
            pairs.append((match.group(2), stack[-1]))
        stack.append(match.group(2))
    return pairs


def test_docstring_tree_matches_the_classes():
    pairs = dict(_docstring_tree())
    assert pairs == EXPECTED_PARENTS


def test_all_domain_errors_are_errors_and_exceptions():
    for name in DOMAIN_ERRORS:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.Error)
        assert issubclass(cls, Exception)


def test_message_is_str_and_attribute():
    error = errors.ToolError("Order 481 belongs to another account.")
    assert str(error) == error.message == "Order 481 belongs to another account."
    assert errors.RunNotFoundError().message == ""


def _sample(name):
    cls = getattr(errors, name)
    if cls is errors.HTTPError:
        return cls("rate limited", status=429, retryable=True, body={"error": "slow down"})
    if cls is errors.StructuredResultError:
        return cls(
            "invalid result",
            schema_name="support_triage",
            validation_errors=["urgent: not a boolean"],
        )
    if issubclass(cls, errors.ProviderError):
        return cls(f"{name} happened", retryable=True, request_id="req-1")
    return cls(f"{name} happened", run_id="run-1", detail={"nested": [1, 2]})


@pytest.mark.parametrize("name", DOMAIN_ERRORS)
def test_every_error_pickles_with_its_attributes(name):
    error = _sample(name)
    for copied in (pickle.loads(pickle.dumps(error)), copy.deepcopy(error), copy.copy(error)):
        assert type(copied) is type(error)
        assert str(copied) == str(error)
        assert copied.message == error.message
        assert copied.args == error.args
        public = {k: v for k, v in vars(error).items() if not k.startswith("_")}
        assert {k: v for k, v in vars(copied).items() if not k.startswith("_")} == public
        assert len(public) >= 2  # the message plus at least one attribute survived


def test_http_error_attributes_survive_pickling():
    error = pickle.loads(pickle.dumps(errors.HTTPError("unavailable", status=503, retryable=True)))
    assert (error.status, error.retryable, str(error)) == (503, True, "unavailable")
    assert errors.HTTPError("x").status is None
    assert errors.HTTPError("x").retryable is False


def test_structured_result_error_attributes_survive_pickling():
    error = errors.StructuredResultError("bad", schema_name="answer", validation_errors=["a", "b"])
    copied = pickle.loads(pickle.dumps(error))
    assert copied.schema_name == "answer"
    assert copied.validation_errors == ("a", "b")
    assert copied.retryable is False
    assert errors.StructuredResultError("x").validation_errors == ()


def test_provider_errors_default_to_not_retryable():
    assert errors.ProviderError("x").retryable is False
    assert errors.ContextWindowOverflowError("x", retryable=True).retryable is True


@pytest.mark.parametrize("cls", [errors.CancelledError, errors.DeadlineExceededError])
def test_control_flow_errors_pickle(cls):
    for error in (cls(), cls("custom reason")):
        copied = pickle.loads(pickle.dumps(error))
        assert type(copied) is cls
        assert str(copied) == copied.message == error.message


def test_control_flow_error_default_messages():
    assert str(errors.CancelledError()) == "The run was cancelled."
    assert str(errors.DeadlineExceededError()) == "The run reached its deadline."


@pytest.mark.parametrize("cls", [errors.CancelledError, errors.DeadlineExceededError])
def test_control_flow_errors_are_errors_but_not_exceptions(cls):
    error = cls()
    assert isinstance(error, lg_core.Error)
    assert issubclass(cls, lg_core.Error)
    assert isinstance(error, BaseException)
    assert not isinstance(error, Exception)
    assert cls in CONTROL_FLOW_ERRORS


@pytest.mark.parametrize("cls", [errors.CancelledError, errors.DeadlineExceededError])
def test_except_exception_does_not_catch_control_flow_errors(cls):
    caught_by = []

    def swallow_everything_ordinary():
        try:
            raise cls()
        except Exception:  # noqa: BLE001 - the point of the test
            caught_by.append("Exception")
        except lg_core.Error:  # virtual subclassing does not apply to except clauses
            caught_by.append("Error")

    with pytest.raises(cls):
        swallow_everything_ordinary()
    assert caught_by == []


def test_control_flow_errors_are_exactly_cancel_and_deadline():
    assert set(CONTROL_FLOW_ERRORS) == {errors.CancelledError, errors.DeadlineExceededError}
