"""Connection options of the ``openrouter`` adapter: the shared ones, aimed at OpenRouter.

What it adds to :mod:`lg_core.providers._http.connection` (the spec's
``Providers::OpenRouter.new(site_url: nil, app_name: nil, base_url: DEFAULT_BASE_URL, **)``):

* ``base_url`` defaults to OpenRouter's API and the key to ``$OPENROUTER_API_KEY`` (the
  spec's one conventional credential), so ``{"adapter": "openrouter"}`` is a whole connection.
* ``site_url`` and ``app_name`` become OpenRouter's app attribution headers
  (``HTTP-Referer`` and ``X-Title``).
* ``provider`` holds OpenRouter's routing preferences (``order``, ``only``, ``ignore``,
  ``data_collection``, ``zdr``, ``sort``, ...), sent with every request of the connection.
  They are connection policy (a data-retention rule holds for every agent that uses the
  connection), so they win over a ``provider`` model setting's values for the same keys,
  and a misspelled key is an error rather than a rule silently not applied.
* ``capabilities`` may be OpenRouter's ``supported_parameters`` list for the model (as its
  catalog lists it); the flags are read from it (the spec's ``OpenRouter#capabilities``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

from lg_core.datamap import thaw
from lg_core.errors import ConfigurationError
from lg_core.models.request import ModelCapabilities
from lg_core.providers._http.connection import ConnectionOptions

DEFAULT_BASE_URL = "https://openrouter.ai/api/v1"
API_KEY_ENV = "OPENROUTER_API_KEY"
# The fields of OpenRouter's ``provider`` object (https://openrouter.ai/docs/features/provider-routing).
ROUTING_KEYS = frozenset(
    {
        "order",
        "allow_fallbacks",
        "require_parameters",
        "data_collection",
        "zdr",
        "enforce_distillable_text",
        "only",
        "ignore",
        "quantizations",
        "sort",
        "max_price",
        "preferred_min_throughput",
        "preferred_max_latency",
    }
)
# OpenRouter's ``supported_parameters`` names for the capability flags.
_FLAG_PARAMETERS = {"tools": "tools", "tool_choice": "tool_choice", "native_structured_output": "structured_outputs"}


@dataclasses.dataclass(frozen=True)
class OpenRouterConnection(ConnectionOptions):
    """The checked options of one OpenRouter connection; the key is never in its repr."""

    adapter: ClassVar[str] = "openrouter"
    default_base_url: ClassVar[str] = DEFAULT_BASE_URL
    key_variable: ClassVar[str] = API_KEY_ENV
    key_variable_by_default: ClassVar[bool] = True
    extra_options: ClassVar[frozenset[str]] = frozenset({"site_url", "app_name"})
    other_options: ClassVar[frozenset[str]] = frozenset({"provider"})

    site_url: str | None = None
    app_name: str | None = None
    provider: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, connection: str, options: Mapping[str, Any]) -> OpenRouterConnection:
        """Check ``options``; a ConfigurationError names the connection and the option."""
        values = dict(options)
        if "capabilities" in values:
            values["capabilities"] = capabilities_option(connection, values["capabilities"])
        if "provider" in values:
            values["provider"] = _routing(connection, values["provider"])
        parsed = super().parse(connection, values)
        assert isinstance(parsed, OpenRouterConnection)
        return parsed

    def _check_types(self) -> None:
        """``site_url`` and ``app_name`` are sent as headers: one line of ASCII text each."""
        super()._check_types()
        for name in ("site_url", "app_name"):
            value = getattr(self, name)
            if value is not None and not (value.isascii() and value.isprintable()):
                raise ConfigurationError(
                    f"provider connection {self.connection!r}: {name} must be a non-empty line of ASCII text "
                    f"(it is sent as an HTTP header), got {value!r}"
                )
        if self.site_url is not None and urlsplit(self.site_url).scheme not in ("http", "https"):
            raise ConfigurationError(
                f"provider connection {self.connection!r}: site_url must be your app's http(s) URL, "
                f"got {self.site_url!r}"
            )

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The key as a bearer token, and OpenRouter's app attribution: the app's URL and its name in the rankings."""
        headers = {"Authorization": f"Bearer {api_key}"}
        if self.site_url:
            headers["HTTP-Referer"] = self.site_url
        if self.app_name:
            headers["X-Title"] = self.app_name
        return headers


def capabilities_option(connection: str, value: Any) -> Any:
    """``capabilities`` as the shared options take it, or with ``supported_parameters``, from
    which the flags not given are read (``tools``, ``tool_choice``, ``structured_outputs``)."""
    if not isinstance(value, Mapping) or "supported_parameters" not in value:
        return value
    names = value["supported_parameters"]
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ConfigurationError(
            f"provider connection {connection!r}: capabilities.supported_parameters must be a list of "
            f"parameter names such as ['tools', 'temperature'], got {names!r}"
        )
    flags = {flag: parameter in names for flag, parameter in _FLAG_PARAMETERS.items()}
    try:
        return ModelCapabilities(**{**flags, **dict(value), "supported_parameters": tuple(names)})
    except TypeError as exc:
        raise ConfigurationError(f"provider connection {connection!r}: capabilities: {exc}") from None


def _routing(connection: str, value: Any) -> dict[str, Any]:
    """The ``provider`` routing preferences: a mapping of OpenRouter's keys."""
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"provider connection {connection!r}: provider must be a mapping of OpenRouter routing preferences "
            f"such as {{'data_collection': 'deny'}}, got {type(value).__name__}"
        )
    unknown = sorted(str(key) for key in value if key not in ROUTING_KEYS)
    if unknown:
        raise ConfigurationError(
            f"provider connection {connection!r}: provider has unknown routing preference {unknown[0]!r}; "
            f"OpenRouter's are: {', '.join(sorted(ROUTING_KEYS))}"
        )
    if "require_parameters" in value and not isinstance(value["require_parameters"], bool):
        raise ConfigurationError(
            f"provider connection {connection!r}: provider.require_parameters must be true or false"
        )
    return dict(thaw(value))


__all__ = ["API_KEY_ENV", "DEFAULT_BASE_URL", "OpenRouterConnection", "ROUTING_KEYS", "capabilities_option"]
