"""ModelResolver as the spec's API page shows it: roles, targets and inline mappings."""

from __future__ import annotations

import pytest

from lg_core import ConfigurationError, ModelResolver


def test_profiles_keyword_defines_roles_as_in_the_spec(script):
    """The spec's ``ModelResolver.new(profiles: {customer_support: {target: ...}})``."""
    target = script([{"text": "unused"}])
    resolver = ModelResolver(
        profiles={"customer_support": {"target": target, "settings": {"temperature": 0.2}}},
        default_model="customer_support",
    )
    model = resolver.resolve("customer_support")
    assert (model.target, model.role, model.settings) == (target, "customer_support", {"temperature": 0.2})
    assert resolver.resolve(None).role == "customer_support"


def test_a_role_name_with_a_colon_is_refused(script):
    with pytest.raises(ConfigurationError, match="contains ':'"):
        ModelResolver(profiles={"support:fast": {"target": script([{"text": "unused"}])}})
