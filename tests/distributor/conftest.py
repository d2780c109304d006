"""Distributor fixtures: settings on the test Redis with short windows and leases, and source builders."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from harvester.config.model import SourceConfig
from harvester.settings import HarvesterSettings, get_settings

from tests.fixtures.servers import RedisServer

FAST_SETTINGS = {
    "HARVESTER_RATE_WINDOW_SECONDS": "2",
    "HARVESTER_LEASE_SECONDS": "2",
    "HARVESTER_REAP_INTERVAL_SECONDS": "0.5",
    "HARVESTER_RETRY_BASE_SECONDS": "0.2",
    "HARVESTER_RETRY_MAX_SECONDS": "2",
    "HARVESTER_REDIS_RETRY_MAX_SECONDS": "0.5",
}


@pytest.fixture
def distributor_env(redis_server: RedisServer, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
                    ) -> dict[str, str]:
    """HARVESTER_* for this process and for subprocesses: the test Redis, short windows and leases."""
    values = {"HARVESTER_REDIS_URL": redis_server.url, **FAST_SETTINGS}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    return {**os.environ, **values}


@pytest.fixture
def settings(distributor_env: dict[str, str]) -> Iterator[HarvesterSettings]:
    yield get_settings()
    get_settings.cache_clear()


def make_source(name: str, **fields: Any) -> SourceConfig:
    """A valid source of detail pages; ``fields`` override anything (rate_limit={...}, priority=...)."""
    base: dict[str, Any] = {
        "name": name, "input": {"seeds": ["http://example.test/"], "kind": "details"},
        "attributes": {"title": {"css": "h1::text"}},
    }
    return SourceConfig(**{**base, **fields})


@pytest.fixture
def source_factory() -> Callable[..., SourceConfig]:
    return make_source
