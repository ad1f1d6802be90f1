"""Connection options every HTTP adapter accepts: auth, base URL, timeouts, headers, client.

Options come from ``configure(providers={"name": {"adapter": ..., ...}})`` and
are checked when the connection is first built, so a misspelled option fails
with its name instead of being ignored. The API key is read at first use
(``api_key``, or the environment variable named by ``api_key_env``) and never
appears in a repr or an error message; nor do the values of ``headers``.

A ``base_url`` may carry credentials of a gateway: userinfo
(``https://user:secret@host``) and query parameters (``?key=...``). httpx is
given the address without them: the userinfo becomes the client's ``Basic``
authentication (as httpx itself would make it, but out of every logged URL),
and the query is added to each request's own (so ``/v1?key=k`` and
``chat/completions`` make ``/v1/chat/completions?key=k``). All of them are
:meth:`ConnectionOptions.secret_values`, which the adapter redacts.

An adapter subclasses :class:`ConnectionOptions`: it names itself, its default
base URL and key variable (read without configuration when
``key_variable_by_default``), adds its own options as fields (listed in
``extra_options`` when they are strings, else in ``other_options``, which its
``parse`` checks), and says how the key is sent (:meth:`auth_headers`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from lg_core.errors import ConfigurationError, CredentialError
from lg_core.models.request import ModelCapabilities
from lg_core.providers._http.redaction import REDACTED, basic_token

DEFAULT_TIMEOUT = 120.0  # seconds to wait for each chunk (the spec's read_timeout)
CONNECT_TIMEOUT = 10.0  # the spec's open_timeout
# The spec's DEFAULT_MAX_RESPONSE_BYTES: the most one streamed answer may send, so a runaway
# stream fails its run instead of growing the process until memory runs out.
DEFAULT_MAX_RESPONSE_BYTES = 50 * 1024 * 1024
# Many streaming calls share one client (the engine is synchronous, with threads): allow
# more than httpx's 100 connections.
POOL_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
COMMON_OPTIONS = frozenset(
    {
        "api_key",
        "api_key_env",
        "base_url",
        "timeout",
        "headers",
        "allow_insecure_http",
        "transport",
        "capabilities",
        "max_response_bytes",
    }
)


@dataclasses.dataclass(frozen=True)
class ConnectionOptions:
    """The checked options of one connection; a subclass per adapter."""

    adapter: ClassVar[str]
    default_base_url: ClassVar[str]
    key_variable: ClassVar[str]  # the environment variable the "no API key" hint suggests
    # Read key_variable when neither api_key nor api_key_env is configured (the adapter's one conventional credential).
    key_variable_by_default: ClassVar[bool] = False
    extra_options: ClassVar[frozenset[str]] = frozenset()  # the subclass's own string options
    other_options: ClassVar[frozenset[str]] = frozenset()  # the subclass's own options of other types

    connection: str
    base_url: str = dataclasses.field(repr=False)  # may hold userinfo or a key in its query
    api_key: str | None = dataclasses.field(default=None, repr=False)
    api_key_env: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    allow_insecure_http: bool = False
    transport: httpx.BaseTransport | None = None
    capabilities: ModelCapabilities = dataclasses.field(default_factory=ModelCapabilities.permissive)
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    @classmethod
    def parse(cls, connection: str, options: Mapping[str, Any]) -> ConnectionOptions:
        """Check ``options``; a ConfigurationError names the connection and the option."""
        accepted = COMMON_OPTIONS | cls.extra_options | cls.other_options
        unknown = sorted(set(options) - accepted)
        if unknown:
            raise ConfigurationError(
                f"provider connection {connection!r} has unknown option {unknown[0]!r}; "
                f"the {cls.adapter} adapter accepts: {', '.join(sorted(accepted))}"
            )
        values = dict(options)
        if cls.key_variable_by_default and "api_key" not in values and "api_key_env" not in values:
            values["api_key_env"] = cls.key_variable
        insecure_ok = bool(values.get("allow_insecure_http"))
        parsed = cls(
            connection=connection,
            base_url=_base_url(
                connection, values.pop("base_url", cls.default_base_url), insecure_ok, cls.default_base_url
            ),
            timeout=_seconds(connection, values.pop("timeout", DEFAULT_TIMEOUT)),
            headers=_headers(connection, values.pop("headers", None) or {}),
            capabilities=_capabilities(connection, values.pop("capabilities", None), cls.default_capabilities()),
            **values,
        )
        parsed._check_types()
        return parsed

    @classmethod
    def default_capabilities(cls) -> ModelCapabilities:
        """What a model on this adapter supports unless ``capabilities`` narrows or widens it."""
        return ModelCapabilities.permissive()

    def _check_types(self) -> None:
        self._check_credential_options()
        self._check_shared_options()

    def _check_credential_options(self) -> None:
        """The key and the adapter's own string options; an adapter that authenticates otherwise overrides this."""
        for name in ("api_key", "api_key_env", *sorted(self.extra_options)):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigurationError(f"provider connection {self.connection!r}: {name} must be a non-empty string")

    def _check_shared_options(self) -> None:
        """The options every HTTP adapter takes: the answer's size bound, plain HTTP, the transport."""
        size = self.max_response_bytes
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigurationError(
                f"provider connection {self.connection!r}: max_response_bytes "
                f"must be a positive number of bytes, got {size!r}"
            )
        if not isinstance(self.allow_insecure_http, bool):
            raise ConfigurationError(
                f"provider connection {self.connection!r}: allow_insecure_http must be true or false"
            )
        if self.transport is not None and not isinstance(self.transport, httpx.BaseTransport):
            raise ConfigurationError(
                f"provider connection {self.connection!r}: transport "
                f"must be an httpx transport, got {type(self.transport).__name__}"
            )

    @property
    def endpoint(self) -> str:
        """How messages name this connection: its name and host, never its credentials."""
        return f"provider connection {self.connection!r} ({urlsplit(self.base_url).hostname})"

    def resolve_api_key(self) -> str:
        """The API key, read now (so a rotated environment variable is picked up); CredentialError if none."""
        if self.api_key:
            # As for the environment variable: a newline is no part of a key.
            return _ascii_key(self.connection, self.api_key.strip(), "api_key")
        if self.api_key_env:
            key = os.environ.get(self.api_key_env, "").strip()
            if key:
                return _ascii_key(self.connection, key, f"${self.api_key_env}")
            raise CredentialError(
                f"provider connection {self.connection!r} reads its API key from ${self.api_key_env}, "
                "which is not set; export it (or give api_key) before running agents on this connection"
            )
        raise CredentialError(
            f"provider connection {self.connection!r} has no API key; add api_key_env: {self.key_variable} "
            "(the name of an environment variable holding the key) or api_key to its configuration"
        )

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The headers that carry ``api_key`` (and any other adapter header); a subclass's choice."""
        raise NotImplementedError

    def request_headers(self, api_key: str | None = None) -> dict[str, str]:
        """The configured headers, then the adapter's: a configured header cannot replace the key's.
        ``api_key`` is the key already resolved for this request (resolved here when None)."""
        key = self.resolve_api_key() if api_key is None else api_key
        return {**self.headers, **self.auth_headers(key), "Accept": "text/event-stream"}

    def secret_values(self) -> list[str]:
        """What no text leaving the adapter may hold, as configured: the ``api_key``, every value of
        ``headers``, the ``base_url``'s userinfo (and its Basic token) and query values. A key read
        from the environment or a resolver is known only per request (the provider adds it then)."""
        url = httpx.URL(self.base_url)
        values = [value for value in (self.api_key, *self.headers.values()) if isinstance(value, str)]
        if url.username or url.password:
            values += [url.username, url.password, basic_token(url.username, url.password)]
        values += [value for _name, value in url.params.multi_items()]
        raw_pairs = (pair.partition("=") for pair in url.query.decode("ascii", "replace").split("&"))
        values += [value for _name, _sep, value in raw_pairs]  # as written, e.g. with "+" for a space
        return [value for value in values if value]

    def request_target(self, path: str) -> str:
        """``path`` (relative to the base URL, maybe with its own query) with the ``base_url``'s query
        parameters first: httpx would append the path to the query instead."""
        query = httpx.URL(self.base_url).query.decode("ascii")
        if not query:
            return path
        return f"{path}{'&' if '?' in path else '?'}{query}"

    def build_client(self) -> httpx.Client:
        """The client for this connection: the base URL without userinfo or query (see the module docstring)."""
        url = httpx.URL(self.base_url)
        auth = httpx.BasicAuth(url.username, url.password) if url.username or url.password else None
        return httpx.Client(
            base_url=url.copy_with(username=None, password=None, query=None, fragment=None),
            auth=auth,
            transport=self.transport,
            timeout=httpx.Timeout(self.timeout, connect=min(CONNECT_TIMEOUT, self.timeout)),
            limits=POOL_LIMITS,
            headers={"User-Agent": "littleghost-python"},
        )


def _base_url(connection: str, value: Any, insecure_ok: bool, example: str) -> str:
    """HTTPS unless ``allow_insecure_http`` (the spec's default: plain HTTP exposes the key); a message
    quotes it only as :func:`shown_url` shows it."""
    if not isinstance(value, str) or "://" not in value:
        shown = shown_url(value) if isinstance(value, str) else repr(value)
        raise ConfigurationError(
            f"provider connection {connection!r}: base_url must be a URL like {example}, got {shown}"
        )
    shown = shown_url(value)
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL:
        raise ConfigurationError(f"provider connection {connection!r}: base_url {shown} is not a valid URL") from None
    if url.scheme == "http" and not insecure_ok:
        raise ConfigurationError(
            f"provider connection {connection!r}: base_url {shown} is plain HTTP, which would send the API key "
            "unencrypted; use https, or set allow_insecure_http: true for a local development server"
        )
    if url.scheme not in ("http", "https"):
        raise ConfigurationError(f"provider connection {connection!r}: base_url must be an http(s) URL, got {shown}")
    if url.fragment:
        raise ConfigurationError(
            f"provider connection {connection!r}: base_url {shown} has a fragment (#...), which no request sends"
        )
    if url.query:
        return value  # a trailing "/" of the path stays: the query is not part of it
    return value.rstrip("/")


def shown_url(value: str) -> str:
    """``value`` quoted for a message, its userinfo and query values replaced by ``[redacted]``."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return "(an unreadable URL)"
    netloc = f"{REDACTED}@{parts.netloc.rpartition('@')[2]}" if "@" in parts.netloc else parts.netloc
    pairs = (pair.partition("=") for pair in parts.query.split("&")) if parts.query else ()
    query = "&".join(f"{name}={REDACTED}" if sep else name for name, sep, _value in pairs)
    return repr(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))


def _seconds(connection: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ConfigurationError(
            f"provider connection {connection!r}: timeout must be a positive number of seconds, got {value!r}"
        )
    return float(value)


def _headers(connection: str, value: Any) -> dict[str, str]:
    """Header names to ASCII strings: httpx encodes headers as ASCII and would fail on anything else
    only when the first request is built, with a bare UnicodeEncodeError."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigurationError(f"provider connection {connection!r}: headers must map header names to strings")
    for name, text in value.items():
        if not (name + text).isascii():
            raise ConfigurationError(
                f"provider connection {connection!r}: header {name!r} must be ASCII text (HTTP header values are); "
                "percent-encode or transliterate it"
            )
    return dict(value)


def _ascii_key(connection: str, key: str, source: str) -> str:
    """``key``, which goes out as a header value, so it must be ASCII; the message never shows it."""
    if not key.isascii():
        raise CredentialError(
            f"provider connection {connection!r}: the API key in {source} has characters that are not ASCII, "
            "which no API key has (a typographic quote or space pasted with it?); set it again"
        )
    return key


def _capabilities(connection: str, value: Any, default: ModelCapabilities) -> ModelCapabilities:
    """The adapter's default, changed by the flags ``capabilities`` gives (a server that does less, or more)."""
    if value is None:
        return default
    if isinstance(value, ModelCapabilities):
        return value
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"provider connection {connection!r}: capabilities must be a mapping of flags")
    try:
        return dataclasses.replace(default, **dict(value))
    except TypeError as exc:
        raise ConfigurationError(f"provider connection {connection!r}: capabilities: {exc}") from None


__all__ = ["CONNECT_TIMEOUT", "ConnectionOptions", "DEFAULT_MAX_RESPONSE_BYTES", "DEFAULT_TIMEOUT", "shown_url"]
