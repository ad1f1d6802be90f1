"""The web app example's token table: who a bearer token authenticates, and which token files are refused.

The app's own behaviour over HTTP (401, 404, 413) is in tests/distributed/test_web_app.py.
"""

from __future__ import annotations

import secrets

import pytest

from examples.web_auth import TokenTable
from lg_core import ConfigurationError

ALICE, ALICE_NEXT, BOB = (secrets.token_urlsafe(32) for _ in range(3))


def table() -> TokenTable:
    return TokenTable.from_lines(["# actor token", "", f"alice {ALICE}", f"alice   {ALICE_NEXT}", f"bob\t{BOB}"])


def test_each_token_authenticates_its_actor_and_nothing_else():
    tokens = table()
    assert [tokens.actor_for(token) for token in (ALICE, ALICE_NEXT, BOB)] == ["alice", "alice", "bob"]
    for guess in ("", ALICE[:-1], ALICE + "x", ALICE.upper(), f" {ALICE}", "alice", "\udcff" + BOB):
        assert tokens.actor_for(guess) is None, guess


@pytest.mark.parametrize(
    "lines, match",
    [
        ([f"alice {ALICE} extra"], "line 1: expected 'ACTOR_ID TOKEN', found 3 fields"),
        ([ALICE], "line 1: expected 'ACTOR_ID TOKEN', found 1 fields"),
        ([f"bad/actor {ALICE}"], "line 1: the actor id must be"),
        (["", "alice short-token"], "line 2: the token is shorter than 32 characters"),
        ([f"alice {ALICE}", f"bob {ALICE}"], "line 2: this token is already on another line"),
        (["# nobody yet", ""], "has no 'ACTOR_ID TOKEN' line"),
    ],
)
def test_a_bad_token_file_is_refused_by_line_without_showing_a_token(lines, match):
    with pytest.raises(ConfigurationError, match=match) as refused:
        TokenTable.from_lines(lines, "web-tokens")
    assert ALICE not in str(refused.value) and "short-token" not in str(refused.value)


def test_a_token_file_others_can_read_is_refused(tmp_path):
    path = tmp_path / "web-tokens"
    path.write_text(f"alice {ALICE}\n")
    path.chmod(0o640)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        TokenTable.from_file(path)
    path.chmod(0o600)
    assert TokenTable.from_file(path).actor_for(ALICE) == "alice"


def test_a_missing_token_file_or_a_directory_is_refused(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read the web app's token file"):
        TokenTable.from_file(tmp_path / "missing")
    folder = tmp_path / "folder"
    folder.mkdir(mode=0o700)
    with pytest.raises(ConfigurationError, match="cannot read the web app's token file"):
        TokenTable.from_file(folder)
