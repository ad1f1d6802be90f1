"""A run store URL that cannot work fails where the runtime is built, saying what to write instead.

The message names the URL's problem and the URL to write, rather than a riddle
("supports SQLite and PostgreSQL, got 'postgres'"), advice that cannot help
(installing littleghost[postgres] for a psycopg2 URL) or SQLAlchemy's
OperationalError out of ``start_execution``.
"""

from __future__ import annotations

import pytest

from lg_core import Agent, Configuration, ConfigurationError, with_configuration
from lg_core.store import RunStore
from lg_scheduler.stack.servers import free_port


class UrlAgent(Agent):
    model = "scripted:store-urls"


def test_a_heroku_style_postgres_url_says_how_to_write_it() -> None:
    with pytest.raises(ConfigurationError, match=r"postgres://.*write it as postgresql\+psycopg://") as caught:
        RunStore("postgres://lg:s3cret@127.0.0.1:5432/lg")
    assert "s3cret" not in str(caught.value)


def test_a_url_naming_a_driver_that_is_not_installed_points_at_psycopg() -> None:
    with pytest.raises(ConfigurationError, match=r"'psycopg2', which is not installed.*postgresql\+psycopg://"):
        RunStore("postgresql+psycopg2://lg@127.0.0.1:5432/lg")


def test_another_database_names_the_stores_there_are() -> None:
    with pytest.raises(ConfigurationError, match=r"got 'mysql'.*sqlite:///path/to/runs.db.*postgresql\+psycopg://"):
        RunStore("mysql://db/runs")


def test_a_server_that_is_not_running_is_a_configuration_error_when_the_runtime_is_built() -> None:
    url = f"postgresql+psycopg://lg:s3cret@127.0.0.1:{free_port()}/lg"  # nothing listens there
    config = Configuration(run_store=url)
    with with_configuration(config), pytest.raises(ConfigurationError, match="cannot open the run store") as caught:
        UrlAgent.start_execution("Where is order 481?")
    assert "server is running" in str(caught.value) and "s3cret" not in str(caught.value)
    assert "\n" not in str(caught.value)  # libpq's reason spans lines; the CLI prints one
    config.close()


def test_a_database_that_does_not_exist_is_named(postgres) -> None:
    with pytest.raises(ConfigurationError, match=r'cannot open the run store.*database "no_such_db" does not exist'):
        RunStore(postgres.url("no_such_db"))
