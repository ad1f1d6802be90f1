"""Where settings come from, and which source to blame for a bad one.

The YAML config file (``lg.yaml`` in the working directory, or the file ``LG_CONFIG``
names) and the ``LG_*`` environment variables are read here; a value they give that
fails validation is described with the file or variable it came from, so the message
says what to fix instead of only which setting is wrong.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsError, YamlConfigSettingsSource

from lg_core.datamap import MAX_JSON_DEPTH
from lg_core.errors import ConfigurationError

ENV_PREFIX = "LG_"
# What a JSON-valued environment variable looks like, for the error message of a bad one.
_JSON_EXAMPLES = {
    "rate_limits": '{"openai": "600/min"}',
    "provider_adapters": '{"gateway": "myapp.providers:GatewayProvider"}',
    "providers": '{"primary": {"adapter": "openrouter", "api_key_env": "OPENROUTER_API_KEY"}}',
    "models": '{"customer_support": {"target": "primary:openai/gpt-5.6-luna", "settings": {"temperature": 0.2}}}',
}
CONFIG_FILE_NAME = "lg.yaml"
CONFIG_FILE_ENV = "LG_CONFIG"


def config_file_path() -> Path | None:
    """The YAML config file in force: ``$LG_CONFIG`` (which must exist), else ./lg.yaml if present."""
    named = os.environ.get(CONFIG_FILE_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigurationError(
                f"{CONFIG_FILE_ENV}={named} names no readable file; point it at your lg.yaml or unset it"
            )
        return path
    path = Path.cwd() / CONFIG_FILE_NAME
    return path if path.is_file() else None


class YamlFileSource(YamlConfigSettingsSource):
    """The YAML config file as a settings source; a broken file is a ConfigurationError naming the key."""

    def __init__(self, settings_cls: type[BaseSettings], known: Collection[str]) -> None:
        self.path = config_file_path()
        self.known = known  # the settings a file may set
        super().__init__(settings_cls, yaml_file=self.path)

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        import yaml

        try:
            data = super()._read_file(file_path)
        except RecursionError:
            raise ConfigurationError(
                f"config file {file_path} nests too deeply to read: a setting may nest at most {MAX_JSON_DEPTH} "
                "levels of mappings and lists"
            ) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or exc
            raise ConfigurationError(f"config file {file_path} is not valid YAML{where}: {problem}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read config file {file_path}: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigurationError(
                f"config file {file_path} must be a mapping of settings (run_store: ..., broker_url: ...), "
                f"got {type(data).__name__}"
            )
        unknown = sorted(str(key) for key in data if key not in self.known)
        if unknown:
            raise ConfigurationError(
                f"unknown setting {unknown[0]!r} in config file {file_path}{did_you_mean(unknown[0], self.known)}; "
                f"known settings: {', '.join(sorted(self.known))}"
            )
        return data


def import_cause(exc: ValidationError) -> BaseException | None:
    """What a setting's module raised while it was imported (chained by the validator), so the
    ConfigurationError keeps that traceback for a debugger; None for an ordinary bad value."""
    for error in exc.errors():
        raised = (error.get("ctx") or {}).get("error")
        if isinstance(raised, BaseException) and raised.__cause__ is not None:
            return raised.__cause__
    return None


def did_you_mean(name: str, known: Collection[str]) -> str:
    """``; did you mean 'default_model'?`` for a near miss of a setting's name, else nothing."""
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe_settings_error(exc: SettingsError) -> str:
    found = re.search(r'field "([a-z_]+)"', str(exc))
    if found is None:
        return f"invalid configuration: {exc}"
    name = found.group(1)
    return f"invalid configuration: {name} (from ${ENV_PREFIX}{name.upper()}): not valid JSON; " + (
        f"e.g. {ENV_PREFIX}{name.upper()}='{_JSON_EXAMPLES[name]}'" if name in _JSON_EXAMPLES else "give it as JSON"
    )


def describe_validation_error(exc: ValidationError, values: dict[str, Any] | None = None) -> str:
    parts = []
    for error in exc.errors():
        loc = error.get("loc", ())
        where = ".".join(str(p) for p in loc)
        origin = source_of(str(loc[0]), values or {}) if loc else ""
        message = str(error.get("msg", "")).removeprefix("Value error, ")  # our validators' own words
        parts.append(f"{where}{origin}: {message}")
    return "invalid configuration: " + "; ".join(parts)


def too_deep_variable(environ: Mapping[str, str]) -> str:
    """The message for a JSON-valued ``LG_*`` variable nested too deeply to decode, naming it."""
    for name, text in environ.items():
        if name.startswith(ENV_PREFIX):
            try:
                json.loads(text)
            except RecursionError:
                return (
                    f"invalid configuration: ${name} nests too deeply to decode: a setting may nest at most "
                    f"{MAX_JSON_DEPTH} levels of mappings and lists"
                )
            except ValueError:
                continue
    return f"invalid configuration: a setting may nest at most {MAX_JSON_DEPTH} levels of mappings and lists"


def source_of(key: str, values: dict[str, Any]) -> str:
    """Where a bad value came from, so the message says which file or variable to fix."""
    if key in values:
        return ""
    env = f"LG_{key.upper()}"
    if os.environ.get(env):  # an empty one is ignored (env_ignore_empty)
        return f" (from ${env})"
    try:
        path = config_file_path()
    except ConfigurationError:
        return ""
    return f" (in config file {path})" if path is not None else ""


__all__ = [
    "CONFIG_FILE_ENV",
    "CONFIG_FILE_NAME",
    "ENV_PREFIX",
    "YamlFileSource",
    "config_file_path",
    "describe_settings_error",
    "describe_validation_error",
    "did_you_mean",
    "import_cause",
    "too_deep_variable",
]
