"""docker-compose.yaml cannot run here (no Docker engine): check it is consistent with the repository."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest
import yaml
from harvester.cli import build_parser
from harvester.settings import REPOSITORY_ROOT
from harvester.workers.celery_app import declared_queues

pytestmark = pytest.mark.unit

COMPOSE = yaml.safe_load((REPOSITORY_ROOT / "docker-compose.yaml").read_text())
SERVICES: dict[str, dict] = COMPOSE["services"]


def harvester_subcommands() -> set[str]:
    parser = build_parser()
    subparsers = next(action for action in parser._actions if action.dest == "command")
    return set(subparsers.choices)


def test_every_production_service_is_declared() -> None:
    expected = {
        "postgres", "redis", "mongo", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
        "airflow-triggerer", "worker-priority", "worker-default", "worker-pageslots", "distributor", "demo-site",
    }
    assert expected <= set(SERVICES)
    assert SERVICES["mongo"]["image"] == "mongo:8.0"
    assert "healthcheck" in SERVICES["mongo"] and SERVICES["mongo"]["volumes"]
    assert "--appendonly" in SERVICES["redis"]["command"]


def test_airflow_runs_the_celery_executor_on_postgres() -> None:
    environment = SERVICES["airflow-scheduler"]["environment"]
    assert environment["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
    # Airflow's Celery queues must not share a Redis database with Harvester's "default" queue.
    assert environment["AIRFLOW__CELERY__BROKER_URL"].rsplit("/", 1)[1] != environment[
        "HARVESTER_REDIS_URL"].rsplit("/", 1)[1]


def worker_command(name: str) -> list[str]:
    """A worker's argv; a `bash -c` command is split as the shell would (compose's $$ is a literal $)."""
    command = SERVICES[name]["command"]
    if command[:2] == ["bash", "-c"]:
        command = shlex.split(command[2].replace("$$", "$"))
        assert command[0] == "exec"
        command = command[1:]
    return command


def test_worker_services_consume_declared_queues_of_the_one_celery_app() -> None:
    declared = {queue.name for queue in declared_queues()}
    for name in ("worker-priority", "worker-default", "worker-pageslots"):
        command = worker_command(name)
        assert command[0] == "celery"
        app_module = command[command.index("-A") + 1]
        assert hasattr(importlib.import_module(app_module), "app")
        if name != "worker-pageslots":
            assert command[command.index("-Q") + 1] in declared


def test_pageslots_worker_consumes_every_country_queue_in_one_long_lived_process() -> None:
    command = worker_command("worker-pageslots")
    assert command[command.index("-Q") + 1] == "$(harvester pageslots-queues)"
    assert "pageslots-queues" in harvester_subcommands()
    assert command[command.index("--pool") + 1] == "solo"
    assert command[command.index("--concurrency") + 1] == "1"


def test_harvester_commands_exist() -> None:
    available = harvester_subcommands()
    for name in ("distributor", "demo-site"):
        command = SERVICES[name]["command"]
        assert command[0] == "harvester"
        assert command[1] in available, f"{name}: `harvester {command[1]}` does not exist"


def test_secrets_come_from_env_example() -> None:
    text = (REPOSITORY_ROOT / "docker-compose.yaml").read_text()
    referenced = set(re.findall(r"\$\{([A-Z_]+)", text))
    example = (REPOSITORY_ROOT / ".env.example").read_text()
    defined = set(re.findall(r"^([A-Z_]+)=", example, flags=re.MULTILINE))
    assert referenced <= defined, f"missing from .env.example: {referenced - defined}"
    for line in example.splitlines():
        key, _, value = line.partition("=")
        if value and ("PASSWORD" in key or "SECRET" in key):
            assert value not in text, f"{key}'s value is written into docker-compose.yaml"


def test_image_extends_airflow_and_installs_the_same_lock() -> None:
    dockerfile = (REPOSITORY_ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM apache/airflow:3\.3\.2", dockerfile, flags=re.MULTILINE)
    assert "-c /opt/harvester/requirements.lock" in dockerfile
    assert "playwright install" in dockerfile and "chromium" in dockerfile
    assert "include" in dockerfile
    for path in ("requirements.txt", "requirements.lock", "include/pyproject.toml"):
        assert Path(REPOSITORY_ROOT / path).exists()
    lock = (REPOSITORY_ROOT / "requirements.lock").read_text()
    assert "apache-airflow==3.3.2" in lock and "celery==5.6.3" in lock
