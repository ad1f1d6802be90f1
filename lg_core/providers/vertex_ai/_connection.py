"""Connection options of the Vertex AI adapter: the Gemini adapter's, with a Google Cloud
``project`` and ``location`` in place of the API's address, and an OAuth access token
(``Authorization: Bearer``) in place of the API key.

Google's own libraries find a token through Application Default Credentials (a
service account's key, the metadata server); this adapter uses none of them. The token
comes, in this order of preference, from ``access_token`` (fixed, for a short job),
``access_token_env`` (an environment variable read at each request, e.g. filled from
``gcloud auth print-access-token``), or ``credential_resolver``: a function, or its
import path ``module:function``, that the application supplies and that returns a
current token. It is called before each request, so it should cache the token until
shortly before it expires (Google's tokens last an hour).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, cast
from urllib.parse import quote

from lg_core.errors import ConfigurationError, CredentialError
from lg_core.import_path import import_callable
from lg_core.providers._http.connection import ConnectionOptions
from lg_core.providers.gemini._connection import GeminiConnection

DEFAULT_LOCATION = "global"
DEFAULT_API_VERSION = "v1"
# A location is a DNS label in the host name (us-central1-aiplatform.googleapis.com): nothing else may get there.
_LOCATION = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
CREDENTIAL_HINT = (
    " Check the connection's access_token, access_token_env or credential_resolver "
    "(an access token expires after an hour)."
)


@dataclasses.dataclass(frozen=True)
class VertexConnection(GeminiConnection):
    """Options of one Vertex AI connection; no token is ever in its repr."""

    adapter: ClassVar[str] = "vertex_ai"
    default_base_url: ClassVar[str] = "https://aiplatform.googleapis.com"
    extra_options: ClassVar[frozenset[str]] = frozenset(
        {"api_version", "project", "location", "access_token", "access_token_env", "credential_resolver"}
    )

    api_version: str = DEFAULT_API_VERSION
    project: str | None = None
    location: str = DEFAULT_LOCATION
    access_token: str | None = dataclasses.field(default=None, repr=False)
    access_token_env: str | None = None
    credential_resolver: Any = dataclasses.field(default=None, repr=False)

    @classmethod
    def parse(cls, connection: str, options: Mapping[str, Any]) -> ConnectionOptions:
        """As for every adapter, with the regional base URL of ``location`` unless ``base_url`` is given."""
        values = dict(options)
        location = values.get("location", DEFAULT_LOCATION)
        if not isinstance(location, str) or not _LOCATION.match(location):
            raise ConfigurationError(
                f"provider connection {connection!r}: location must be a Google Cloud location such as "
                f"'global' or 'us-central1', got {location!r}"
            )
        if "base_url" not in values and location != DEFAULT_LOCATION:
            values["base_url"] = f"https://{location}-aiplatform.googleapis.com"
        values["credential_resolver"] = _resolver(connection, values.get("credential_resolver"))
        return super().parse(connection, values)

    def _check_credential_options(self) -> None:
        """An OAuth token instead of a key, and ``credential_resolver`` is a function, not a string."""
        if self.api_key is not None or self.api_key_env is not None:
            raise ConfigurationError(
                f"provider connection {self.connection!r}: Vertex AI takes an OAuth access token, not an API key; "
                "use access_token, access_token_env or credential_resolver"
            )
        for name in ("api_version", "project", "access_token", "access_token_env"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigurationError(f"provider connection {self.connection!r}: {name} must be a non-empty string")
        if self.project is None:
            raise ConfigurationError(
                f"provider connection {self.connection!r}: the vertex_ai adapter needs project, "
                "the Google Cloud project id"
            )

    def resolve_api_key(self) -> str:
        """A current access token (CredentialError if none can be had); the provider redacts it from its errors."""
        if self.access_token:
            return self.access_token.strip()
        if self.access_token_env:
            token = os.environ.get(self.access_token_env, "").strip()
            if token:
                return token
            raise CredentialError(
                f"provider connection {self.connection!r} reads its access token from ${self.access_token_env}, "
                "which is not set; export it (e.g. from `gcloud auth print-access-token`) before running agents on it"
            )
        if self.credential_resolver is not None:
            return self._resolved()
        raise CredentialError(
            f"provider connection {self.connection!r} has no access token; add credential_resolver "
            "(a function returning a current token, as 'module:function') or access_token_env to its configuration"
        )

    def _resolved(self) -> str:
        try:
            token = self.credential_resolver()
        except Exception as exc:  # the application's code: its failure is a credential failure of this connection
            raise CredentialError(
                f"provider connection {self.connection!r}: credential_resolver raised {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(token, str) or not token.strip():
            raise CredentialError(
                f"provider connection {self.connection!r}: credential_resolver returned {type(token).__name__}, "
                "not an access token string"
            )
        return token.strip()

    def secret_values(self) -> list[str]:
        """The shared ones and a fixed ``access_token`` (a resolved token is added per request)."""
        return [*super().secret_values(), *([self.access_token] if self.access_token else [])]

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def stream_path(self, model_id: str) -> str:
        """``v1/projects/<project>/locations/<location>/publishers/google/models/<model>:streamGenerateContent?alt=sse``."""
        model = quote(model_id.removeprefix("models/"), safe="")
        project = quote(str(self.project), safe="")
        return (
            f"{self.api_version}/projects/{project}/locations/{self.location}/publishers/google/models/"
            f"{model}:streamGenerateContent?alt=sse"
        )


def _resolver(connection: str, value: Any) -> Callable[[], Any] | None:
    """The resolver function, imported now when given as a path, so that a wrong path fails at configuration."""
    if value is None or callable(value):
        return cast("Callable[[], Any] | None", value)
    if not isinstance(value, str):
        raise ConfigurationError(
            f"provider connection {connection!r}: credential_resolver must be a function or an import path "
            f"'module:function', got {type(value).__name__}"
        )
    try:
        return cast("Callable[[], Any]", import_callable(value, "credential_resolver"))
    except ValueError as exc:
        raise ConfigurationError(f"provider connection {connection!r}: {exc}") from None


__all__ = ["CREDENTIAL_HINT", "DEFAULT_API_VERSION", "DEFAULT_LOCATION", "VertexConnection"]
