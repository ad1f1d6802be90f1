"""Connection options of the Gemini adapter: the shared ones (see
:mod:`lg_core.providers._http.connection`) and ``api_version``, the version
segment of every request's path; the key is sent in the ``x-goog-api-key`` header
(never in the URL, where Google also accepts it, so that no log of URLs holds it)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar
from urllib.parse import quote

from lg_core.models.request import ModelCapabilities
from lg_core.providers._http.connection import ConnectionOptions

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
DEFAULT_API_VERSION = "v1beta"  # where Google documents streamGenerateContent, thinking and thought signatures


@dataclasses.dataclass(frozen=True)
class GeminiConnection(ConnectionOptions):
    """Options of one Gemini API connection; the key is never in its repr."""

    adapter: ClassVar[str] = "gemini"
    default_base_url: ClassVar[str] = DEFAULT_BASE_URL
    key_variable: ClassVar[str] = "GEMINI_API_KEY"
    extra_options: ClassVar[frozenset[str]] = frozenset({"api_version"})

    api_version: str = DEFAULT_API_VERSION

    @classmethod
    def default_capabilities(cls) -> ModelCapabilities:
        """Every Gemini model takes function declarations and a function-calling mode. Native
        structured output (``responseSchema``) is off unless ``capabilities:
        {native_structured_output: true}`` turns it on: models before Gemini 3 refuse it beside
        function declarations ("Function calling with a response mime type ... is unsupported"),
        and an agent with tools would then fail; a result schema goes through a tool meanwhile."""
        return ModelCapabilities(tools=True, tool_choice=True, native_structured_output=False)

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-goog-api-key": api_key}

    def stream_path(self, model_id: str) -> str:
        """``<version>/models/<model>:streamGenerateContent?alt=sse``; the model id is quoted, so
        that no character of it can change the path or the query."""
        model = model_id.removeprefix("models/")
        return f"{self.api_version}/models/{quote(model, safe='')}:streamGenerateContent?alt=sse"


__all__ = ["DEFAULT_API_VERSION", "DEFAULT_BASE_URL", "GeminiConnection"]
