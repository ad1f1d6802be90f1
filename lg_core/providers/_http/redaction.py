"""Keeping a connection's credentials out of everything that leaves an adapter.

A connection's secrets are its API key (or access token), every value of its
``headers`` option, the user and password of a ``base_url``'s userinfo (and the
``Basic`` token they make) and the values of a ``base_url``'s query string. An
endpoint may echo any of them (a gateway that quotes the header it refused, a
malformed status line quoting the request), so text an adapter hands on is
cleaned of them by whole value: :meth:`Secrets.scrub` cleans an exception (its
message, its attributes such as ``body``, and the exceptions it was raised from)
before it leaves :class:`~lg_core.providers._http.provider.StreamingProvider`.

A value shorter than :data:`MIN_SECRET_CHARS` is not searched for (the spec's
Redactor makes the same choice): no credential is that short, and replacing
every ``x`` of a message because an ``api_key`` of ``"x"`` was configured would
garble ordinary text. Each value is also searched for as JSON and URL encoding
write it, the forms in which a server quotes it.

httpx logs every request's URL at INFO (``HTTP Request: POST https://...``) and
httpcore logs response headers at DEBUG; neither knows which parts are secret.
:func:`watch_http_logs` adds :class:`SecretLogFilter` to those loggers: it
redacts the secrets of every connection alive in the process from their records
before any handler sees them. Secrets are held weakly, so a closed and dropped
provider's values are forgotten with it.
"""

from __future__ import annotations

import base64
import collections
import json
import logging
import threading
import weakref
from collections.abc import Iterable
from typing import TypeVar
from urllib.parse import quote

MIN_SECRET_CHARS = 8
REDACTED = "[redacted]"
RECENT_KEYS = 4  # resolved keys kept per connection: a rotated key's late errors are still cleaned
MAX_CHAINED = 8  # how deep an exception's __cause__/__context__ chain is cleaned
# The loggers of the HTTP stack that print URLs or headers (a logger's filter does not apply to its children).
HTTP_LOGGERS = ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy", "httpcore.socks")
E = TypeVar("E", bound=BaseException)


def secret_forms(value: str) -> set[str]:
    """``value`` as written, as a JSON string writes it and percent-encoded: each form at least
    MIN_SECRET_CHARS long (a shorter value yields none)."""
    if len(value) < MIN_SECRET_CHARS:
        return set()
    forms = {value, json.dumps(value)[1:-1], quote(value, safe="")}
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


def basic_token(username: str, password: str) -> str:
    """The token of ``Authorization: Basic``, which a server may echo in place of the password."""
    return base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


class Secrets:
    """The secret values of one connection and the text cleaned of them.

    ``fixed`` are known from the configuration; a key read at request time (from
    an environment variable, a credential resolver) is :meth:`add`-ed then, and
    the latest few are kept.
    """

    def __init__(self, fixed: Iterable[str] = ()) -> None:
        self._fixed = frozenset(form for value in fixed for form in secret_forms(value))
        self._recent: collections.deque[str] = collections.deque(maxlen=RECENT_KEYS)
        self._lock = threading.Lock()
        self._ordered = self._order()

    def add(self, value: str | None) -> None:
        """Also clean ``value`` (a key just resolved) from now on."""
        if not value or value in self._recent or len(value) < MIN_SECRET_CHARS:
            return
        with self._lock:
            self._recent.append(value)
            self._ordered = self._order()

    def _order(self) -> tuple[str, ...]:
        """Every form, longest first: a secret holding another is replaced whole."""
        recent = {form for value in self._recent for form in secret_forms(value)}
        return tuple(sorted(self._fixed | recent, key=len, reverse=True))

    @property
    def latest(self) -> str | None:
        """The key most recently added (the one the latest request carried), None before any."""
        return self._recent[-1] if self._recent else None

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[redacted]``."""
        for secret in self._ordered:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def scrub(self, error: E) -> E:
        """``error`` cleaned in place (so its traceback is kept): its message and string attributes,
        and those of the exceptions it was raised from or during."""
        seen: set[int] = set()
        current: BaseException | None = error
        while current is not None and id(current) not in seen and len(seen) < MAX_CHAINED:
            seen.add(id(current))
            self._scrub_one(current)
            current = current.__cause__ or current.__context__
        return error

    def _scrub_one(self, error: BaseException) -> None:
        error.args = tuple(self.redact(arg) if isinstance(arg, str) else arg for arg in error.args)
        attributes = getattr(error, "_attributes", None)  # lg_core.errors.Error keeps them for pickling
        if isinstance(attributes, dict):
            for name, value in list(attributes.items()):
                if isinstance(value, str):
                    attributes[name] = self.redact(value)
                    setattr(error, name, attributes[name])
        message = getattr(error, "message", None)
        if isinstance(message, str):
            error.message = self.redact(message)  # type: ignore[attr-defined]


class SecretLogFilter(logging.Filter):
    """Redacts the secrets of every watched connection from a log record's message (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._watched: weakref.WeakSet[Secrets] = weakref.WeakSet()
        # Re-entrant: copying the set allocates, an allocation may run the garbage collector, and
        # collecting an unfinished HTTP response stream logs from its finalizer, on this thread,
        # back into this filter. A plain Lock deadlocked the thread there.
        self._lock = threading.RLock()

    def watch(self, secrets: Secrets) -> None:
        with self._lock:
            self._watched.add(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            watched = list(self._watched)
        if not watched:
            return True
        original = text = record.getMessage()
        for secrets in watched:
            text = secrets.redact(text)
        if text != original:
            record.msg, record.args = text, None
        return True


_LOG_FILTER = SecretLogFilter()


def watch_http_logs(secrets: Secrets) -> None:
    """Redact ``secrets`` from the HTTP stack's log records from now on (the filter is added once)."""
    _LOG_FILTER.watch(secrets)
    for name in HTTP_LOGGERS:
        logger = logging.getLogger(name)
        if _LOG_FILTER not in logger.filters:
            logger.addFilter(_LOG_FILTER)


__all__ = [
    "HTTP_LOGGERS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "SecretLogFilter",
    "Secrets",
    "basic_token",
    "secret_forms",
    "watch_http_logs",
]
