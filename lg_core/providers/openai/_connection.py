"""Connection options of the OpenAI-compatible adapter: the shared ones, ``organization``,
and the key sent as a bearer token (see :mod:`lg_core.providers._http.connection`)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from lg_core.providers._http.connection import ConnectionOptions

DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclasses.dataclass(frozen=True)
class OpenAIConnection(ConnectionOptions):
    """Compatible APIs are assumed permissive (the spec); ``capabilities`` narrows that for a server that is not."""

    adapter: ClassVar[str] = "openai"
    default_base_url: ClassVar[str] = DEFAULT_BASE_URL
    key_variable: ClassVar[str] = "OPENAI_API_KEY"
    extra_options: ClassVar[frozenset[str]] = frozenset({"organization"})

    organization: str | None = None

    def auth_headers(self, api_key: str) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {api_key}"}
        if self.organization:
            headers["OpenAI-Organization"] = self.organization
        return headers


__all__ = ["DEFAULT_BASE_URL", "OpenAIConnection"]
