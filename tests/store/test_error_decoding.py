"""A stored error decodes from an allow-list: reading a run imports nothing its row names.

The store is data, not code: a forged ``lg_runs`` or ``lg_events`` row naming a
module must not make a reader import (run) it. LittleGhost's errors, Python's
built-in exceptions and the classes an application registers decode as
themselves; any other class reads back as ``Error("<ClassName>: <message>")``.
Each test writes a run to a SQLite file, changes the rows as an attacker with
access to the database would, and reads the run back as the application and
``lg runs show`` do.
"""

from __future__ import annotations

import importlib
import json
import sqlite3
import sys
import uuid

import pytest
from typer.testing import CliRunner

import lg_core
from lg_core import Agent, Error, HTTPError, register_error_class
from lg_core.cli import app


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A module on sys.path whose import leaves a file behind: ``(module name, that file)``."""
    name = f"planted_{uuid.uuid4().hex[:10]}"
    marker = tmp_path / f"{name}.imported"
    (tmp_path / f"{name}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n\n\nclass Boom(Exception):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, marker
    sys.modules.pop(name, None)


def failing_agent(script, error):
    def turns(request):
        raise error

    return type("FailingAgent", (Agent,), {"model": script(turns)})


def forge(configuration, sql: str, *parameters) -> None:
    with sqlite3.connect(configuration.run_store.removeprefix("sqlite:///")) as db:
        db.execute(sql, parameters)


def test_a_forged_run_row_or_event_naming_a_module_imports_nothing(file_config, script, planted):
    name, marker = planted
    run = failing_agent(script, HTTPError("upstream refused", status=400)).ask("Hi")
    forged = json.dumps({"class": f"{name}:Boom", "name": "Boom", "message": "forged"})
    forge(file_config, "UPDATE lg_runs SET error = ? WHERE id = ?", forged, run.id)
    forge(
        file_config,
        "UPDATE lg_events SET data = ? WHERE run_id = ? AND type = 'run_error'",
        json.dumps({"message": "m", "error": json.loads(forged)}),
        run.id,
    )

    stored = lg_core.get_run(run.id)
    [terminal] = [event for event in stored.events() if event.type == "run_error"]
    shown = CliRunner().invoke(app, ["runs", "show", run.id, "--store", file_config.run_store])

    assert type(stored.error) is Error and str(stored.error) == "Boom: forged"
    assert type(terminal.data["error"]) is Error and str(terminal.data["error"]) == "Boom: forged"
    assert shown.exit_code == 0 and "Boom" in shown.stdout
    assert not marker.exists() and name not in sys.modules
    importlib.import_module(name)  # the planted module was importable: only the decoder declined
    assert marker.exists()


def test_littleghost_and_builtin_errors_decode_as_themselves(file_config, script):
    failed = failing_agent(script, HTTPError("upstream refused", status=400, retryable=False)).ask("Hi")
    crashed = failing_agent(script, KeyError("missing")).ask("Hi")

    http, key = lg_core.get_run(failed.id).error, lg_core.get_run(crashed.id).error

    assert type(http) is HTTPError and (http.status, http.retryable) == (400, False)
    assert type(key) is KeyError and key.args == ("'missing'",)


def test_an_application_error_decodes_as_itself_once_registered(file_config, script):
    class QuotaExceeded(Exception):
        """An application's own error, raised where its model is called."""

    run = failing_agent(script, QuotaExceeded("tenant 42 is over quota")).ask("Hi")

    before = lg_core.get_run(run.id).error
    assert register_error_class(QuotaExceeded) is QuotaExceeded
    after = lg_core.get_run(run.id).error

    assert type(before) is Error and str(before) == "QuotaExceeded: tenant 42 is over quota"
    assert type(after) is QuotaExceeded and str(after) == "tenant 42 is over quota"


def test_private_attributes_of_a_stored_error_are_not_set(file_config, script):
    run = failing_agent(script, HTTPError("upstream refused", status=400)).ask("Hi")
    forged = {
        "class": "lg_core.errors:HTTPError",
        "name": "HTTPError",
        "message": "forged",
        "attributes": {"status": 500, "_attributes": {"status": 200}, "__class__": "x"},
    }
    forge(file_config, "UPDATE lg_runs SET error = ? WHERE id = ?", json.dumps(forged), run.id)

    error = lg_core.get_run(run.id).error

    assert type(error) is HTTPError and error.status == 500
    assert error._attributes["status"] == 500


@pytest.mark.parametrize(
    "forged",
    [
        {"class": "builtins:SystemExit", "name": "SystemExit", "message": "bye"},
        {"class": "builtins:print", "name": "print", "message": "x"},
        {"class": "os:system", "name": "system", "message": "x"},
        {
            "class": "lg_core.errors:HTTPError",
            "name": "HTTPError",
            "message": "x",
            "attributes": ["not", "a", "mapping"],
        },
        {"class": 42, "message": "no name"},
    ],
    ids=["base-exception", "builtin-function", "module-function", "attributes-not-a-mapping", "class-not-a-string"],
)
def test_anything_off_the_list_or_unreadable_reads_back_as_a_generic_error(file_config, script, forged):
    run = failing_agent(script, HTTPError("upstream refused", status=400)).ask("Hi")
    forge(file_config, "UPDATE lg_runs SET error = ? WHERE id = ?", json.dumps(forged), run.id)

    error = lg_core.get_run(run.id).error

    assert type(error) is Error
    assert str(error).endswith(f": {forged['message']}")


def test_register_error_class_takes_only_an_exception_class():
    for value in (ValueError("an instance"), dict, "myapp.errors:QuotaExceeded", None):
        with pytest.raises(TypeError, match="takes an exception class"):
            register_error_class(value)
