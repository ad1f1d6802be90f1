"""docker/: the compose file runs the same services, commands and settings as `lg stack`.

These tests read the files; Docker itself is exercised by ops/docker-smoke.sh
(build, every service up, a run, Flower, a killed worker), which the test
suite does not run: it needs a Docker daemon and the images the compose file names.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from lg_scheduler.stack.credentials import StackCredentials
from lg_scheduler.stack.stack import (
    SERVICES,
    WORKER_SERVICES,
    StackSettings,
    service_commands,
    stack_variables,
)

DOCKER = Path(__file__).resolve().parents[2] / "docker"
APP_SERVICES = [name for name in SERVICES if name not in ("redis", "postgres")]


def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_compose_has_every_stack_service():
    assert list(compose()["services"]) == list(SERVICES)


def test_application_services_run_the_stack_commands_with_the_same_variables():
    services = compose()["services"]
    settings = StackSettings(ports={"redis": 1, "postgres": 2, "flower": 3}, imports=["app"])
    variables = set(stack_variables(settings, StackCredentials("pg", "redis", "flower")))
    for name, command in service_commands().items():
        service = services[name]
        assert service["command"][: len(command)] == command, name
        assert variables <= set(service["environment"]), name
        assert service["environment"]["LG_RUN_STORE"].startswith("postgresql+psycopg://lg:${POSTGRES_PASSWORD:?"), name
        assert service["environment"]["LG_BROKER_URL"].startswith("redis://:${REDIS_PASSWORD:?"), name
        assert service["environment"]["LG_BROKER_URL"].endswith("}@redis:6379/0"), name
        assert service["build"]["dockerfile"] == "docker/Dockerfile", name
        for dependency in ("redis", "postgres"):
            assert service["depends_on"][dependency]["condition"] == "service_healthy", name


def test_healthchecks_and_sandbox_settings():
    services = compose()["services"]
    for name in ("redis", "postgres", *WORKER_SERVICES, "flower"):
        assert services[name]["healthcheck"]["test"], name
    for name in WORKER_SERVICES:
        assert "inspect ping" in " ".join(services[name]["healthcheck"]["test"]), name
    assert "/healthcheck" in " ".join(services["flower"]["healthcheck"]["test"])
    assert "seccomp=unconfined" in services["worker-sandbox"]["security_opt"]
    assert "FLOWER_BASIC_AUTH" in services["flower"]["environment"]  # Flower can shut workers down: never open
    assert services["flower"]["ports"] == ["127.0.0.1:5555:5555"]


def test_every_server_requires_a_password_that_compose_refuses_to_start_without():
    """The compose network's addresses are reachable from the host: no server may be open there."""
    services = compose()["services"]
    redis, postgres = services["redis"], services["postgres"]
    assert redis["command"][-2:] == ["--requirepass", "${REDIS_PASSWORD:?set REDIS_PASSWORD for Redis}"]
    assert "protected-mode" not in " ".join(redis["command"])
    health = " ".join(redis["healthcheck"]["test"])
    assert 'REDISCLI_AUTH="$$REDIS_PASSWORD"' in health and "grep -q PONG" in health  # not in redis-cli's argv
    assert postgres["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    assert "POSTGRES_HOST_AUTH_METHOD" not in postgres["environment"]  # never "trust"
    assert services["flower"]["environment"]["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")
    for name in ("redis", "postgres"):
        assert "ports" not in services[name], name  # reachable from the compose network only


def test_dockerfile_builds_one_image_for_every_role():
    text = (DOCKER / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    assert "bubblewrap" in text
    assert re.search(r'pip install "\.\[\$\{EXTRAS\}\]"', text)
    assert re.search(r"^USER lg$", text, re.M)
    for package in ("lg_core", "lg_workers", "lg_scheduler"):
        assert f"COPY {package} {package}" in text


def test_the_smoke_overlay_only_mounts_the_smoke_agents_into_application_services():
    overlay = yaml.safe_load((DOCKER.parent / "ops" / "docker-smoke" / "compose.smoke.yaml").read_text())
    assert set(overlay["services"]) == set(APP_SERVICES)
    for name, service in overlay["services"].items():
        assert service == {"volumes": ["../ops/docker-smoke:/app/src:ro"]}, name
    assert (DOCKER.parent / "ops" / "docker-smoke" / "smokeapp" / "agents.py").exists()
