"""The local stack's passwords, and files only their owner can read.

``lg stack up`` gives PostgreSQL (user ``lg``), Redis and Flower (user ``lg``)
a password each, generated with :mod:`secrets` the first time and kept in the
stack's ``env`` file (mode 0600) inside the variables that use them:

    export LG_RUN_STORE='postgresql+psycopg://lg:PASSWORD@127.0.0.1:5432/lg'
    export LG_BROKER_URL='redis://:PASSWORD@127.0.0.1:6379/0'
    export FLOWER_BASIC_AUTH='lg:PASSWORD'

so the file a user sources is the one place they are written. A password
reaches the stack's processes through their environment or a private file,
never their command line, which every local user can read in ``ps``. An env
file without them (a stack from before they existed, or a deleted file) gets
new ones at the next ``up``.
"""

from __future__ import annotations

import os
import secrets
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

FLOWER_USER = "lg"
PASSWORD_BYTES = 24  # 32 URL-safe characters: nothing to quote in a URL or a shell


@dataclass(frozen=True)
class StackCredentials:
    """One password per server of the stack."""

    postgres: str
    redis: str
    flower: str

    @property
    def flower_basic_auth(self) -> str:
        """Flower's ``basic_auth`` option: ``user:password``."""
        return f"{FLOWER_USER}:{self.flower}"


def new_password() -> str:
    return secrets.token_urlsafe(PASSWORD_BYTES)


def load_credentials(env_file: Path) -> tuple[StackCredentials, set[str]]:
    """The passwords ``env_file`` holds, a new one for each it lacks, and the names of the new ones."""
    variables = read_env_file(env_file)
    found = {
        "postgres": _url_password(variables.get("LG_RUN_STORE")),
        "redis": _url_password(variables.get("LG_BROKER_URL")),
        "flower": _basic_auth_password(variables.get("FLOWER_BASIC_AUTH")),
    }
    fresh = {name for name, value in found.items() if not value}
    return StackCredentials(**{name: value or new_password() for name, value in found.items()}), fresh


def read_env_file(path: Path) -> dict[str, str]:
    """The ``export NAME=VALUE`` lines of an env file written by ``lg stack up`` (nothing if it is missing)."""
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    variables = {}
    for line in text.splitlines():
        if line.startswith("export "):
            try:
                words = shlex.split(line[len("export ") :])
            except ValueError:  # a quote left open by a hand edit: that line is not read
                continue
            if len(words) == 1 and "=" in words[0]:
                name, _, value = words[0].partition("=")
                variables[name] = value
    return variables


def _url_password(url: str | None) -> str | None:
    try:
        return urlsplit(url).password if url else None
    except ValueError:
        return None


def _basic_auth_password(value: str | None) -> str | None:
    user, _, password = (value or "").partition(":")
    return password if user == FLOWER_USER and password else None


def write_private(path: Path, text: str, *, owner: tuple[int, int] | None = None) -> None:
    """Write ``text`` to ``path``, readable by its owner only, from the first byte.

    The content goes to a new file that ``mkstemp`` creates with mode 0600 in the
    same directory, which is then renamed over ``path``: there is no moment at
    which another user could open it, and a reader never sees it half written.
    ``owner`` (uid, gid) hands the file to another user (PostgreSQL's, when the
    stack runs as root).
    """
    descriptor, draft = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if owner is not None:
            os.chown(draft, *owner)
        os.replace(draft, path)
    except BaseException:
        Path(draft).unlink(missing_ok=True)
        raise


__all__ = ["FLOWER_USER", "StackCredentials", "load_credentials", "new_password", "read_env_file", "write_private"]
