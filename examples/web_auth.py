"""Who is calling the web app example: bearer tokens mapped to actors, read from a private file.

    LG_WEB_TOKENS_FILE=/etc/myapp/web-tokens    # mode 0600, one "ACTOR_ID TOKEN" per line

    # actor   token: 32 or more random characters, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'
    alice     <alice's token>
    bob       <bob's token>

A request acts for the actor whose token it sends (``Authorization: Bearer
TOKEN``). An actor may have several lines (a new token beside the old one while
clients move over); a token names one actor. Blank lines and ``#`` comments are
ignored.

The file holds secrets, so it must not be readable by other users, and the
tokens stay out of the code, the repository and the process's arguments. A
presented token is compared with every configured one in constant time (the
SHA-256 digests, so neither a token's characters nor its length show in the
response time). This is enough for an example and for a small internal
service; a larger one would verify its identity provider's tokens here instead
(OIDC, a session cookie), and return the same actor id.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lg_core.errors import ConfigurationError
from lg_core.run_ids import ID_PATTERN, ID_RULE

TOKENS_FILE_ENV = "LG_WEB_TOKENS_FILE"
MIN_TOKEN_LENGTH = 32  # characters: 192 bits of a url-safe base64 token


@dataclass(frozen=True)
class TokenTable:
    """Token digests and the actor each one authenticates."""

    entries: tuple[tuple[bytes, str], ...]

    @classmethod
    def from_environment(cls) -> TokenTable:
        """The table in the file ``$LG_WEB_TOKENS_FILE`` names; ConfigurationError when it is unset."""
        path = os.environ.get(TOKENS_FILE_ENV)
        if not path:
            raise ConfigurationError(
                f"{TOKENS_FILE_ENV} is not set: the web app serves authenticated callers only; point it at a "
                "file of 'ACTOR_ID TOKEN' lines (see examples/README.md)"
            )
        return cls.from_file(Path(path))

    @classmethod
    def from_file(cls, path: Path) -> TokenTable:
        """The table in ``path``, which must be a regular file only its owner can read."""
        try:
            info = path.stat()
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read the web app's token file {path}: {exc}") from None
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            raise ConfigurationError(
                f"the web app's token file {path} must be a regular file that only its owner can read "
                f"(mode {stat.S_IMODE(info.st_mode):o}): chmod 600 {path}"
            )
        return cls.from_lines(text.splitlines(), str(path))

    @classmethod
    def from_lines(cls, lines: Iterable[str], source: str = "tokens") -> TokenTable:
        """Parse ``ACTOR_ID TOKEN`` lines; ConfigurationError names a bad line by number, never its token."""
        entries: dict[bytes, str] = {}
        for number, line in enumerate(lines, start=1):
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            digest = _digest(_checked_token(fields, f"{source} line {number}"))
            if digest in entries:
                raise ConfigurationError(
                    f"{source} line {number}: this token is already on another line; a token names one actor"
                )
            entries[digest] = fields[0]
        if not entries:
            raise ConfigurationError(f"{source} has no 'ACTOR_ID TOKEN' line: no one could call the web app")
        return cls(tuple(entries.items()))

    def actor_for(self, token: str) -> str | None:
        """The actor ``token`` authenticates, or None.

        Every configured digest is compared, with no early exit, so the time
        taken does not depend on which entry (if any) matches.
        """
        presented = _digest(token)
        actor = None
        for digest, owner in self.entries:
            if hmac.compare_digest(presented, digest):
                actor = owner
        return actor


def _checked_token(fields: list[str], where: str) -> str:
    """The token of one line's fields, after checking the line's shape and actor id."""
    if len(fields) != 2:
        raise ConfigurationError(f"{where}: expected 'ACTOR_ID TOKEN', found {len(fields)} fields")
    actor, token = fields
    if not ID_PATTERN.fullmatch(actor):
        raise ConfigurationError(f"{where}: the actor id must be {ID_RULE}")
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigurationError(
            f"{where}: the token is shorter than {MIN_TOKEN_LENGTH} characters; generate a random one"
        )
    return token


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


__all__ = ["MIN_TOKEN_LENGTH", "TOKENS_FILE_ENV", "TokenTable"]
