"""Configuration.session_actor: the persistence actor is derived once, where the run
starts, and stored with the run, so every later process uses the same one."""

from __future__ import annotations

import pytest

import lg_core
from lg_core import Configuration, ConfigurationError, SessionActorError, with_configuration
from lg_core.config import build_configuration
from tests.sessions.session_app import RecallAgent


def tenant_of(invocation):
    """A resolver as an application writes one: the actor from trusted context."""
    return invocation.context.get("tenant")


@pytest.fixture
def tenant_config():
    configuration = Configuration(session_actor=tenant_of)
    with with_configuration(configuration):
        yield configuration
    configuration.close()


def stored(config, actor_id, session_id="conv-1"):
    snapshot = config.runtime().session_store.load(session_id, actor_id=actor_id)
    return [] if snapshot is None else [m.text for m in snapshot.messages]


def test_runs_whose_resolver_gives_one_actor_share_the_session_whatever_their_actor_id(tenant_config):
    RecallAgent.ask("Hello from Ada.", session_id="conv-1", actor_id="user-1", context={"tenant": "acme"})
    second = RecallAgent.ask("Who spoke?", session_id="conv-1", actor_id="user-2", context={"tenant": "acme"})

    assert second.response == "seen: Hello from Ada. | Who spoke?"
    assert stored(tenant_config, "acme") == ["Hello from Ada.", "seen: Hello from Ada.", "Who spoke?", second.response]
    for user in ("user-1", "user-2"):  # the session is the tenant's, not its users'
        with pytest.raises(SessionActorError):
            stored(tenant_config, user)
    # The tools still see the application's actor: only persistence uses the derived one.
    assert second.invocation.actor_id == "user-2"


def test_another_derived_actor_naming_the_session_is_refused(tenant_config):
    RecallAgent.ask("Acme's secret.", session_id="conv-1", actor_id="user-1", context={"tenant": "acme"})
    other = RecallAgent.ask("Anything stored?", session_id="conv-1", actor_id="user-1", context={"tenant": "globex"})

    assert other.failed and isinstance(other.error, SessionActorError)
    assert other.response is None
    assert stored(tenant_config, "acme") == ["Acme's secret.", "seen: Acme's secret."]


def test_the_derived_actor_is_stored_with_the_run_and_used_after_a_new_runtime(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    first = Configuration(run_store=url, session_actor=tenant_of)
    with with_configuration(first):
        run = RecallAgent.ask("Remember me.", session_id="conv-1", actor_id="user-1", context={"tenant": "acme"})
        assert first.runtime().store.load_run(run.id).actor_id == "acme"
    first.close()
    # A process without the resolver (a worker, a CLI) reads the actor from the run row.
    later = Configuration(run_store=url)
    with with_configuration(later):
        assert lg_core.get_run(run.id).session_actor_id == "acme"
        assert stored(later, "acme") == ["Remember me.", "seen: Remember me."]
    later.close()


def test_without_a_resolver_the_actor_is_the_invocations(config):
    run = RecallAgent.ask("Plain.", session_id="conv-1", actor_id="user-7")
    assert run.session_actor_id == "user-7"
    assert stored(config, "user-7") == ["Plain.", "seen: Plain."]


@pytest.mark.parametrize("bad", [42, "", "   ", "user 7", " user-7", "-user", "u" * 129])
def test_a_resolver_returning_no_actor_id_is_refused_before_anything_is_stored(bad):
    # The id rule an invocation's actor_id follows: a broken id is configuration, refused before the run exists.
    configuration = Configuration(session_actor=lambda invocation: bad)
    with with_configuration(configuration):
        with pytest.raises(ConfigurationError, match="session_actor must return a non-empty string actor id or None"):
            RecallAgent.ask("Lost?", session_id="conv-1", actor_id="user-1")
        assert lg_core.list_runs() == []
    configuration.close()


def test_a_resolver_can_be_named_by_import_path_as_in_yaml_or_the_environment(monkeypatch):
    monkeypatch.setenv("LG_SESSION_ACTOR", "tests.sessions.test_session_actor:tenant_of")
    assert Configuration().session_actor is tenant_of


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("no_colon_here", "is not an import path; write it as 'module:function'"),
        ("tests.sessions.nowhere:fn", "cannot be imported"),
        ("tests.sessions.session_app:RecallAgent.model", "not a callable"),
        (3, "session_actor must be a callable"),
    ],
)
def test_a_bad_resolver_setting_is_a_configuration_error(value, message):
    with pytest.raises(ConfigurationError, match=message):
        build_configuration(session_actor=value)


@pytest.mark.parametrize("store", ["memory", "postgres"])
def test_a_run_waiting_on_a_derived_actors_session_starts_when_the_run_before_it_ends(request, store):
    """The finishing commit names the session its end may start by the stored (derived) actor,
    not the invocation's: with the invocation's the waiting run would never start."""
    from tests.sessions import session_app

    url = "sqlite://" if store == "memory" else request.getfixturevalue("pg_url")
    configuration = Configuration(run_store=url, session_actor=tenant_of)
    session_app.reset()
    try:
        with with_configuration(configuration):
            first = RecallAgent.start_execution(
                "gate:g1 first", session_id="conv-1", actor_id="user-1", context={"tenant": "acme"}
            )
            session_app.wait_until_entered("g1")
            second = RecallAgent.start_execution(
                "second", session_id="conv-1", actor_id="user-2", context={"tenant": "acme"}
            )
            assert second.state == "pending"

            session_app.release("g1")
            assert first.wait(timeout=30).completed
            run = second.wait(timeout=30)
    finally:
        session_app.release("g1")
        configuration.close()

    assert run.completed and run.response == "seen: gate:g1 first | second"
