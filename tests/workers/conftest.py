"""Fixtures of the worker tests: source YAML files the workers read, and an in-process batch runner."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from harvester.config.model import SourceConfig
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.settings import HarvesterSettings
from harvester.workers.batch import BatchRunner

from tests.fixtures.demo_site import demo_source_document


@pytest.fixture
def worker_settings(configure_settings: Callable[..., HarvesterSettings]) -> HarvesterSettings:
    """Test servers plus a sources directory of this test, short retries and leases (also exported)."""
    return configure_settings(retry_base_seconds=0.2, retry_max_seconds=1, heartbeat_seconds=1, lease_seconds=30,
                              body_size_cap_bytes=512 * 1024, max_redirects=5)


@pytest.fixture
def write_source(worker_settings: HarvesterSettings, demo_site) -> Callable[..., SourceConfig]:
    """Write a demo source YAML into the test's sources directory and return its config."""

    def write(name: str = "demo_test", **overrides: Any) -> SourceConfig:
        document = demo_source_document(demo_site.url, name, **overrides)
        (worker_settings.sources_dir / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
        return SourceConfig.model_validate(document)

    return write


@pytest.fixture
def runner(worker_settings: HarvesterSettings) -> Iterator[BatchRunner]:
    runner = BatchRunner(worker_settings)
    yield runner
    runner.close()


class Crawl:
    """Drive intake -> admission -> batch by hand (what the distributor and Celery do), for a test."""

    def __init__(self, runner: BatchRunner, redis_client) -> None:
        self.runner = runner
        self.intake = Intake(redis_client, runner.settings)
        self.store = RateLimitStore(redis_client, runner.settings)

    def push(self, source: SourceConfig, *messages: TaskMessage) -> None:
        self.intake.push(source, list(messages))

    def step(self, source: SourceConfig, batch: int = 16) -> dict[str, Any] | None:
        admission = self.store.admit(source.name, batch)
        if not admission.messages:
            return None
        return self.runner.run(admission.deliveries())  # with their lease tokens, as Celery delivers them


@pytest.fixture
def crawl(runner: BatchRunner, redis_client) -> Crawl:
    return Crawl(runner, redis_client)
